"""``register-instance`` and ``add-replica``: write an instance's entry in the local registry."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from ambrosia_core.errors import ArgumentError
from ambrosia_ic.errors import LogStoreError, RegistryError

from .. import registry

__all__ = ["add_add_replica", "add_register"]

_NAME_HELP = ("the instance's name: letters, digits, '_', '.', '-' (it names files and "
              "directories)")
_CREATE_SERVICE_HELP = (
    "what a start does: auto recovers if a checkpoint exists, else starts afresh (the "
    "default); no-recovery refuses to start when a checkpoint exists; always-recover refuses "
    "to start when there is none to recover from (the real tool's A, N, Y also work)")

_CREATE_SERVICE = {"auto": "auto", "a": "auto", "no-recovery": "no-recovery", "n": "no-recovery",
                   "always-recover": "always-recover", "y": "always-recover"}


def _create_service(value: str) -> str:
    try:
        return _CREATE_SERVICE[value.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not one of auto, no-recovery, always-recover (or A, N, Y)"
        ) from None


# Options register-instance needs for a new instance; an existing one keeps its own.
_NEW_INSTANCE_NEEDS = {"receive_port": "-rp/--receive-port", "send_port": "-sp/--send-port",
                       "ic_port": "-p/--ic-port", "log_dir": "-l/--log-dir"}
_REGISTER_DEFAULTS = {"current_version": 0, "active_active": False,
                      "log_trigger_size_mb": 1000, "create_service": "auto",
                      "keep_checkpoints": registry.DEFAULT_KEEP_CHECKPOINTS, "log_store": "",
                      "ic_host": registry.LOOPBACK,
                      "lease_ms": registry.DEFAULT_LEASE_MS, "publish": ""}
_IC_HOST_HELP = ("the address this coordinator listens for links on (default 127.0.0.1; "
                 "0.0.0.0 or :: need --advertise); the binding's ports stay on 127.0.0.1")
_ADVERTISE_HELP = ("the host other coordinators dial to reach this one, named in its epoch "
                   "claims (default: the --ic-host)")


def _fill_from_registration(args: argparse.Namespace) -> None:
    """Options not given keep the registered values (so `register-instance -i NAME -uv 2`
    updates a registration in place), or take their defaults for a new instance.

    Raises:
        ArgumentError: a new instance lacks one of its ports or its log directory.
    """
    try:
        old: registry.Registration | None = registry.load(args.instance_name, args.home)
    except RegistryError:
        if registry.registration_exists(args.instance_name, args.home):
            raise  # damaged: say so rather than overwrite it
        old = None
    if old is None:
        missing = [flag for field, flag in _NEW_INSTANCE_NEEDS.items()
                   if getattr(args, field) is None]
        if missing:
            raise ArgumentError(f"the following arguments are required: {', '.join(missing)} "
                              f"({args.instance_name!r} is not registered yet)")
        for field, value in _REGISTER_DEFAULTS.items():
            if getattr(args, field) is None:
                setattr(args, field, value)
        return
    # A new current version means no upgrade unless one is asked for too; otherwise a
    # pending upgrade stays registered.
    new_current_only = args.current_version is not None and args.upgrade_version is None
    # A new bind host is advertised itself, unless a different host was advertised before.
    if (args.ic_host is not None and args.advertise_host is None
            and old.advertise_host == old.ic_host):
        args.advertise_host = args.ic_host
    for field in attrs.fields_dict(registry.Registration):
        if getattr(args, field, False) is None:
            setattr(args, field, getattr(old, field))
    if new_current_only:
        args.upgrade_version = None


def _register(args: argparse.Namespace) -> int:
    _fill_from_registration(args)
    reg = registry.register(
        instance_name=args.instance_name,
        receive_port=args.receive_port,
        send_port=args.send_port,
        ic_port=args.ic_port,
        log_dir=args.log_dir,
        current_version=args.current_version,
        upgrade_version=args.upgrade_version,
        active_active=args.active_active,
        log_trigger_size_mb=args.log_trigger_size_mb,
        create_service=args.create_service,
        keep_checkpoints=args.keep_checkpoints,
        log_store=args.log_store,
        ic_host=args.ic_host,
        advertise_host=args.advertise_host,
        lease_ms=args.lease_ms,
        publish=args.publish,
        home=args.home,
    )
    _publish(reg, args.home)
    upgrade = f", upgrading to {reg.upgrade_version} at its next start" if reg.upgrading else ""
    link = _link_address(reg.ic_host, reg.advertise_host, reg.ic_port)
    print(f"registered {reg.instance_name}: receive {reg.receive_port}, send {reg.send_port}, "
          f"ic {reg.ic_port}{link}, logs {reg.log_store or registry.instance_dir(reg)}, version "
          f"{reg.current_version}{upgrade}{_published(reg.publish)}")
    return 0


def _link_address(host: str, advertise: str, port: int) -> str:
    """How registration lines show a link address other than the default."""
    if host == advertise == registry.LOOPBACK:
        return ""
    shown = f" (links at {registry.format_address(advertise, port)}"
    return shown + (f", listening on {host})" if host != advertise else ")")


def _cluster(value: str) -> str:
    """``--publish``'s argument: a ``raft://`` address ('' for none).

    Raises:
        argparse.ArgumentTypeError: it is not one (argparse says so in one line).
    """
    from ..registry.raft_address import parse_address  # no pyzmq needed to parse
    if not value:
        return value
    try:
        parse_address(value, "cluster")
    except RegistryError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def _publish(reg: registry.Registration, home: str | None, also: str | None = None) -> None:
    """The registration and its replicas' link addresses go into the cluster of its log
    store, the one it is registered to be published in (``--publish``) and ``also``, for
    replicas and callers on other machines (``ambrosia ic --registry``) and for callees,
    which take a caller's registration from their cluster at its first link."""
    clusters = list(dict.fromkeys(c for c in (reg.log_store, reg.publish, also) if c))
    if not clusters:
        return  # a registration kept on this machine only: no event loop, no log readers
    import asyncio

    from ..logstore.registrations import publish_registration
    from ..registry.raft_address import without_secret
    for cluster in clusters:
        try:
            asyncio.run(publish_registration(cluster, registry.published(reg, home)))
        except LogStoreError as err:
            raise RegistryError(f"{reg.instance_name} is registered here, but the cluster at "
                                f"{without_secret(cluster)} did not take the registration: "
                                f"{err}") from None


def _published(*clusters: str | None) -> str:
    """How registration lines show where ``--publish`` put it (a log store's cluster goes
    unsaid)."""
    from ..registry.raft_address import without_secret
    shown = list(dict.fromkeys(without_secret(c) for c in clusters if c))
    return f", published in {' and '.join(shown)}" if shown else ""


_PUBLISH_HELP = ("also publish the registration (with its replicas' link addresses) in "
                 "this ØMQ RAFT cluster (add ?secret=S for its secret), where callees and "
                 "replicas on other machines find it; a --log-store cluster gets it anyway. "
                 "Kept: each later change (add-replica too) is published there again; "
                 "'' stops it")

_PUBLISH_ONCE_HELP = ("also publish the registration (with its replicas' link addresses) in "
                      "this ØMQ RAFT cluster, this once; the clusters of --log-store and of "
                      "register-instance --publish get it anyway")


def add_register(sub: Any) -> None:
    p = sub.add_parser("register-instance", aliases=["RegisterInstance"],
                       help="register an instance in the local registry, or change a "
                            "registration (options not given keep their registered values)",
                       description="Register an instance (-i, -rp, -sp, -p and -l required), "
                                   "or change a registration: options not given keep their "
                                   "registered values (e.g. `-i NAME -uv 2` registers an "
                                   "upgrade to version 2).")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True, help=_NAME_HELP)
    p.add_argument("-rp", "--receive-port", "--receivePort", type=int,
                   help="the port the binding writes to (the coordinator's receive port)")
    p.add_argument("-sp", "--send-port", "--sendPort", type=int,
                   help="the port the binding reads from (the coordinator's send port)")
    p.add_argument("-p", "--ic-port", "--port", type=int,
                   help="the port other coordinators connect to")
    p.add_argument("-l", "--log-dir", "--log",
                   help="where the logs and checkpoints go (in DIR/<instance>_<version>/); "
                        "created if missing, and refused unless a file can be created in it")
    p.add_argument("-cv", "--current-version", "--currentVersion", type=int,
                   help="the version the instance runs now (default 0); the number is the "
                        "immortal class's `version`")
    p.add_argument("-uv", "--upgrade-version", "--upgradeVersion", type=int, default=None,
                   help="upgrade to this version at the next start (default: no upgrade)")
    p.add_argument("-aa", "--active-active", "--activeActive", action="store_true", default=None,
                   help="an active/active instance: this is replica 0, add-replica adds more")
    p.add_argument("-lts", "--log-trigger-size-mb", "--logTriggerSize", type=int,
                   help="take a checkpoint and start a new log when the log reaches this "
                        "many MB (default 1000)")
    p.add_argument("-cs", "--create-service", "--createService", type=_create_service,
                   metavar="{auto,no-recovery,always-recover}",
                   help=_CREATE_SERVICE_HELP)
    # default None: an update of a registration keeps the registered value
    p.add_argument("--keep-checkpoints", type=int, default=None, metavar="K",
                   help="keep the last K checkpoints with their logs, so a repro can start "
                        "from any of them (at least 1; default "
                        f"{registry.DEFAULT_KEEP_CHECKPOINTS})")
    p.add_argument("--log-store", default=None, metavar="raft://HOST:PORT,...",
                   help="keep the log in a ØMQ RAFT cluster instead of files in the log "
                        "directory (add ?secret=S for the cluster's secret; '' goes back to "
                        "files)")
    p.add_argument("--ic-host", default=None, metavar="HOST", help=_IC_HOST_HELP)
    p.add_argument("--advertise", dest="advertise_host", default=None, metavar="HOST",
                   help=_ADVERTISE_HELP)
    p.add_argument("--publish", type=_cluster, default=None, metavar="raft://HOST:PORT,...",
                   help=_PUBLISH_HELP)
    # The lease is no option (registry.DEFAULT_LEASE_MS says why); a registration keeps the
    # one it has.
    p.set_defaults(handler=_register, lease_ms=None)


def _add_replica_cmd(args: argparse.Namespace) -> int:
    rep = registry.add_replica(
        instance_name=args.instance_name, replica=args.replica,
        receive_port=args.receive_port, send_port=args.send_port, ic_port=args.ic_port,
        upgrade_version=args.upgrade_version, ic_host=args.ic_host,
        advertise_host=args.advertise_host, home=args.home,
    )
    reg = registry.load(args.instance_name, args.home)
    _publish(reg, args.home, args.publish)
    print(f"added replica {rep.number} of {args.instance_name}: receive {rep.receive_port}, "
          f"send {rep.send_port}, ic {rep.ic_port}"
          f"{_link_address(rep.ic_host, rep.advertise_host, rep.ic_port)}"
          f"{_published(reg.publish, args.publish)}")
    return 0


def add_add_replica(sub: Any) -> None:
    p = sub.add_parser("add-replica", aliases=["AddReplica"],
                       help="add a replica to an active/active instance")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the active/active instance (registered with --active-active)")
    p.add_argument("-r", "--replica", "--replicaNum", type=int, required=True,
                   help="the replica's number, 1 or more (0 is the registration itself)")
    p.add_argument("-rp", "--receive-port", "--receivePort", type=int, required=True,
                   help="the port this replica's binding writes to")
    p.add_argument("-sp", "--send-port", "--sendPort", type=int, required=True,
                   help="the port this replica's binding reads from")
    p.add_argument("-p", "--ic-port", "--port", type=int, required=True,
                   help="the port other coordinators connect to while this replica is primary")
    p.add_argument("-uv", "--upgrade-version", "--upgradeVersion", type=int, default=None,
                   help="this replica upgrades the instance to this version")
    p.add_argument("--ic-host", default=registry.LOOPBACK, metavar="HOST", help=_IC_HOST_HELP)
    p.add_argument("--advertise", dest="advertise_host", default=None, metavar="HOST",
                   help=_ADVERTISE_HELP)
    p.add_argument("--publish", type=_cluster, default=None, metavar="raft://HOST:PORT,...",
                   help=_PUBLISH_ONCE_HELP)
    p.set_defaults(handler=_add_replica_cmd)
