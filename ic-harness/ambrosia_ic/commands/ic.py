"""``ic``: run the coordinator of a registered instance until it ends or is stopped."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ambrosia_core.metrics import add_metrics_option
from ambrosia_core.tls import add_tls_options

from .. import registry
from .afresh import add_start_afresh

if TYPE_CHECKING:  # the coordinator is imported when `ic` runs, not for other commands
    import asyncio

    from ambrosia_core.metrics import MetricsServer

    from ..coordinator import StandaloneCoordinator
    from ..replication.raft import RaftReplica
    from ..replication.shared_dir import SharedDirReplica

__all__ = ["EXIT_SIGINT", "add_ic"]

EXIT_SIGINT = 130


def _ic(args: argparse.Namespace) -> int:
    from ambrosia_core.metrics import serve

    # Before anything is written: a metrics port in use stops the start with one line.
    metrics = serve(args.metrics)
    try:
        return _run_coordinator(args, metrics)
    finally:
        if metrics is not None:
            metrics.close()


def _run_coordinator(args: argparse.Namespace, metrics: MetricsServer | None) -> int:
    import functools

    from ambrosia_core.errors import CoordinatorError
    from ambrosia_core.loops import loop_runner, shorten_slice
    from ambrosia_core.tls import tls_from_args

    from ..coordinator import LinkOptions
    from ..coordinator.directory import RegistryDirectory
    from ..launch import STOPPED_PREFIX
    from ..logdir import check_log_dir
    from .afresh import prepare_start

    home = registry.ambrosia_home(args.home)
    reg = _registration(args.instance_name, home, args.registry)
    if reg.log_store and not reg.active_active:
        raise CoordinatorError(
            f"{reg.instance_name} is registered with the log store {reg.log_store}, which "
            "needs --active-active (or --log-store '' to use its log directory)")
    prepare_start(reg, home, afresh=args.start_afresh,
                  command=f"ambrosia ic -i {reg.instance_name}",
                  warn=lambda line: print(f"ambrosia-ic: {reg.instance_name}: {line}",
                                          file=sys.stderr, flush=True))
    check_log_dir(registry.instance_dir(reg))  # it may have become unusable since
    cls = _coordinator_class(reg)
    run = loop_runner()
    shorten_slice()
    link = LinkOptions(
        args.ic_host or None, args.advertise or None,
        registry.read_secret_file(args.link_secret_file) if args.link_secret_file else None,
        tls_from_args(args))
    # Registrations this registry lacks are read from the cluster ``--registry`` names,
    # else from the instance's own log store.
    directory = functools.partial(RegistryDirectory, home, args.registry or reg.log_store)
    code, signum = run(_serve_until_stopped(_run_replicas(
        lambda: cls(reg, home, replica=args.replica, link=link, directory=directory),
        metrics)))
    if signum is None:
        return code
    # On stdout, beside the readiness line: whoever started us reads both there.
    print(f"{STOPPED_PREFIX} instance={reg.instance_name} signal={signal.Signals(signum).name}",
          flush=True)
    return EXIT_SIGINT if signum == signal.SIGINT else 0


def _coordinator_class(reg: registry.Registration) -> type[
        StandaloneCoordinator | SharedDirReplica | RaftReplica]:
    """The coordinator a registration needs, importing only its own: the Raft replica
    brings pyzmq and the Raft client, which a start on files never uses (about 0.08 s
    of CPU on every start)."""
    if reg.log_store:
        from ..replication.raft import RaftReplica
        return RaftReplica
    if reg.active_active:
        from ..replication.shared_dir import SharedDirReplica
        return SharedDirReplica
    from ..coordinator import StandaloneCoordinator
    return StandaloneCoordinator


async def _run_replicas(make: Callable[[], StandaloneCoordinator | SharedDirReplica |
                                         RaftReplica], metrics: MetricsServer | None) -> int:
    """Run the coordinator ``make`` gives; a replica that a newer primary fenced off
    starts over as a standby, a new coordinator on the same ports (its binding starts
    over too: ``ambrosia_core.superseded``). Returns the exit code of the last run."""
    import functools

    from ..coordinator import StandaloneCoordinator
    from ..coordinator.metrics import coordinator_source

    while True:
        coordinator = make()
        source = None
        if metrics is not None:
            source = (coordinator_source(coordinator)
                      if isinstance(coordinator, StandaloneCoordinator)
                      else coordinator_source(coordinator.c,
                                              functools.partial(_role, coordinator)))
            metrics.add(source)
        try:
            code = await coordinator.run()
        finally:
            if metrics is not None and source is not None:
                metrics.remove(source)
        if isinstance(coordinator, StandaloneCoordinator) or coordinator.fenced_by is None:
            return code


def _role(replica: SharedDirReplica | RaftReplica) -> str:
    return replica.role


def _registration(name: str, home: Path, cluster: str) -> registry.Registration:
    """The local registration of ``name``; if there is none and ``cluster`` is a
    ``raft://`` address, the one published there, stored in the local registry first
    (with its replicas' ports) so this machine needs no copy of the registry directory.

    Raises:
        RegistryError: registered in neither place, or the cluster could not be read.
    """
    if not cluster or registry.registration_exists(name, home):
        return registry.load(name, home)
    import asyncio

    from ambrosia_ic.errors import LogStoreError, RegistryError

    from ..logstore.registrations import fetch_registration
    from ..registry.raft_address import without_secret

    shown = without_secret(cluster)
    try:
        doc = asyncio.run(fetch_registration(cluster, name))
    except LogStoreError as err:
        raise RegistryError(f"{name} is not registered in {home}, and the cluster at "
                            f"{shown} could not be read: {err}") from None
    if doc is None:
        raise RegistryError(f"instance {name!r} is registered neither in {home} nor in the "
                            f"cluster at {shown}")
    registry.adopt(doc, home, f"the registration of {name} in {shown}")
    return registry.load(name, home)


async def _serve_until_stopped(run: Coroutine[Any, Any, int]) -> tuple[int, int | None]:
    """Run the coordinator; SIGTERM or SIGINT stops it as an ordinary stop (the write in
    progress finishes, everything acknowledged is durable). Returns its exit code, or the
    signal that stopped it."""
    import asyncio

    loop = asyncio.get_running_loop()
    task = loop.create_task(run)
    got: list[int] = []

    def on_signal(signum: int) -> None:
        if not got:  # a second signal must not cut the stop short
            got.append(signum)
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await task, None
    except asyncio.CancelledError:
        if not got:
            raise
        return 0, got[0]
    finally:
        _drop_signal_handlers(loop, ignore=bool(got))


def _drop_signal_handlers(loop: asyncio.AbstractEventLoop, *, ignore: bool) -> None:
    """Remove our handlers while the loop is still whole: closing the loop closes its
    wakeup pipe before it removes them, and a signal in between (the starter's stop, after
    the process group's) would be reported as a failed write. With ``ignore``, further stop
    signals are ignored (blocked meanwhile, so none meets the default action)."""
    sigs = {signal.SIGTERM, signal.SIGINT}
    if ignore:
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    for sig in sigs:
        loop.remove_signal_handler(sig)
        if ignore:
            signal.signal(sig, signal.SIG_IGN)  # also discards one pending meanwhile
    if ignore:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)


def add_ic(sub: Any) -> None:
    p = sub.add_parser(
        "ic", help="run the coordinator of a registered instance",
        description="Run the coordinator of a registered instance beside its binding (of "
                    "any language), which connects to the instance's receive and send "
                    "ports, until it is stopped or the binding goes. Exit codes: 0 "
                    "stopped by SIGTERM (130: SIGINT), the ordinary stop; 1 a failure, "
                    "the binding closing its connection included (the coordinator cannot "
                    "tell a binding that stopped from one that crashed, so a supervisor "
                    "restarts the pair); 2 the binding broke the protocol. A replica "
                    "fenced off by a newer primary does not exit: it rejoins as a standby "
                    "on the same ports, and `ambrosia run` connected to it starts afresh.")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance")
    p.add_argument("-r", "--replica", "--replicaNum", type=int, default=0,
                   help="which replica of an active/active instance (default 0)")
    p.add_argument("--registry", default=os.environ.get("AMBROSIA_REGISTRY", ""),
                   metavar="raft://HOST:PORT,...",
                   help="a Raft cluster to read registrations from when this machine's "
                   "registry lacks them, this instance's, a callee's or a caller's at its "
                   "first link (they are kept there afterwards; default: "
                   "$AMBROSIA_REGISTRY; for callees and callers, else the instance's own "
                   "log store)")
    p.add_argument("--ic-host", default=None, metavar="HOST",
                   help="listen for links on HOST for this run instead of the registered "
                   "host (0.0.0.0 or :: need --advertise)")
    p.add_argument("--advertise", default=None, metavar="HOST",
                   help="the host other coordinators dial for this run (named in this "
                   "replica's epoch claims; default: the registered one, or --ic-host)")
    p.add_argument("--link-secret-file", default=os.environ.get("AMBROSIA_LINK_SECRET_FILE"),
                   metavar="FILE",
                   help="authenticate links with the secret in FILE (as `link-secret export` "
                   "writes it) instead of the registry's (default: "
                   "$AMBROSIA_LINK_SECRET_FILE)")
    add_start_afresh(p)
    add_metrics_option(p, what="the coordinator's")
    add_tls_options(p)
    p.set_defaults(handler=_ic)
