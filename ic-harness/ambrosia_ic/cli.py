"""The coordinator's commands (``python -m ambrosia_ic``). Sub-commands mirror the real
``Ambrosia.exe``.

Adding a sub-command: write ``add_<name>(subparsers)`` that registers a parser whose
``handler`` default is a function ``(args) -> int``, and list it in ``COMMANDS``. The
``ambrosia`` command (the ``ambrosia_cli`` package) is these commands plus the ones that
need the binding: ``run``, and ``log dump`` with method names; this package never imports
the binding's runtime or programming model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

import attrs

from ambrosia_py.errors import AmbrosiaError, ArgumentError, RegistryError

from . import registry
from .dump import Describe, FormatRpc, dump_entries, format_entry, format_rpc_ids
from .launch import STOPPED_PREFIX
from .logdir import check_log_dir

__all__ = ["COMMANDS", "EXIT_USAGE", "Parser", "add_log", "build_parser", "dump_log",
           "execute", "main"]

EXIT_USAGE = 2
EXIT_DIVERGED = 3
EXIT_SIGINT = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool its reader left


class Parser(argparse.ArgumentParser):
    """Argument errors are one line and exit code 2, with no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


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


def _bool(value: str) -> bool:
    v = value.lower()
    if v in ("true", "1", "yes", "y"):
        return True
    if v in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


# ------------------------------------------------------------------ register-instance


# Options register-instance needs for a new instance; an existing one keeps its own.
_NEW_INSTANCE_NEEDS = {"receive_port": "-rp/--receive-port", "send_port": "-sp/--send-port",
                       "ic_port": "-p/--ic-port", "log_dir": "-l/--log-dir"}
_REGISTER_DEFAULTS = {"current_version": 0, "active_active": False,
                      "log_trigger_size_mb": 1000, "create_service": "auto",
                      "keep_checkpoints": registry.DEFAULT_KEEP_CHECKPOINTS}


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
        home=args.home,
    )
    upgrade = f", upgrading to {reg.upgrade_version} at its next start" if reg.upgrading else ""
    print(f"registered {reg.instance_name}: receive {reg.receive_port}, send {reg.send_port}, "
          f"ic {reg.ic_port}, logs {registry.instance_dir(reg)}, version "
          f"{reg.current_version}{upgrade}")
    return 0


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
    p.set_defaults(handler=_register)


# ------------------------------------------------------------------ add-replica


def _add_replica_cmd(args: argparse.Namespace) -> int:
    rep = registry.add_replica(
        instance_name=args.instance_name, replica=args.replica,
        receive_port=args.receive_port, send_port=args.send_port, ic_port=args.ic_port,
        upgrade_version=args.upgrade_version, home=args.home,
    )
    print(f"added replica {rep.number} of {args.instance_name}: receive {rep.receive_port}, "
          f"send {rep.send_port}, ic {rep.ic_port}")
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
    p.set_defaults(handler=_add_replica_cmd)


# ------------------------------------------------------------------ ic


def _ic(args: argparse.Namespace) -> int:
    from .coordinator import Coordinator
    from .replica import ReplicaCoordinator

    home = registry.ambrosia_home(args.home)
    reg = registry.load(args.instance_name, home)
    check_log_dir(registry.instance_dir(reg))  # it may have become unusable since
    cls = ReplicaCoordinator if reg.active_active else Coordinator
    coordinator = cls(reg, home, replica=args.replica)
    code, signum = asyncio.run(_serve_until_stopped(coordinator.run()))
    if signum is None:
        return code
    # On stdout, beside the readiness line: whoever started us reads both there.
    print(f"{STOPPED_PREFIX} instance={reg.instance_name} signal={signal.Signals(signum).name}",
          flush=True)
    return EXIT_SIGINT if signum == signal.SIGINT else 0


async def _serve_until_stopped(run: Coroutine[Any, Any, int]) -> tuple[int, int | None]:
    """Run the coordinator; SIGTERM or SIGINT stops it as an ordinary stop (the write in
    progress finishes, everything acknowledged is durable). Returns its exit code, or the
    signal that stopped it."""
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
    p = sub.add_parser("ic", help="run the coordinator of a registered instance")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance")
    p.add_argument("-r", "--replica", "--replicaNum", type=int, default=0,
                   help="which replica of an active/active instance (default 0)")
    p.set_defaults(handler=_ic)


# ------------------------------------------------------------------ debug-instance


def _debug(args: argparse.Namespace) -> int:
    from .debug import run_debug_instance

    reg = registry.load(args.instance_name, args.home)
    version = reg.current_version if args.current_version is None else args.current_version
    try:
        result = asyncio.run(run_debug_instance(
            reg, checkpoint=args.checkpoint, current_version=version,
            testing_upgrade=args.testing_upgrade, receive_port=args.receive_port,
            send_port=args.send_port, idle_timeout=args.idle_timeout, stdout=sys.stdout,
        ))
    except AmbrosiaError as err:
        if args.json:
            print(json.dumps({"status": "error", "error": str(err)}), flush=True)
        raise
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True), flush=True)
    else:
        head = (f"debug-instance {result.instance} checkpoint {result.checkpoint}: replayed "
                f"{result.records_replayed} records, {result.outputs} outputs")
        if result.status == "ok":
            print(f"{head}; the outputs match the recorded run", flush=True)
        elif result.status == "unchecked":
            print(f"{head}; {result.detail}", flush=True)
        else:
            print(f"{head}; {result.detail}", flush=True)
    return EXIT_DIVERGED if result.status == "diverged" else 0


def add_debug(sub: Any) -> None:
    p = sub.add_parser("debug-instance", aliases=["DebugInstance"],
                       help="replay a checkpoint and its logs to a binding (repro / upgrade test)")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance whose files to replay")
    p.add_argument("-c", "--checkpoint", type=int, required=True,
                   help="replay checkpoint N and the logs N, N+1, ... (see `log dump`)")
    p.add_argument("-cv", "--current-version", "--currentVersion", type=int, default=None,
                   help="which version's directory (default: the registered current version)")
    p.add_argument("-tu", "--testing-upgrade", "--testingUpgrade", nargs="?", const=True,
                   default=False, type=_bool, metavar="true|false",
                   help="test an upgrade: the binding upgrades right after loading the checkpoint")
    p.add_argument("-rp", "--receive-port", "--receivePort", type=int, default=None,
                   help="the port the binding writes to (default: the registered one)")
    p.add_argument("-sp", "--send-port", "--sendPort", type=int, default=None,
                   help="the port the binding reads from (default: the registered one)")
    p.add_argument("--idle-timeout", type=float, default=None,
                   help="end this many seconds after the replay was sent and the binding "
                        "went quiet (default: wait until the binding closes)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    p.set_defaults(handler=_debug)


# ------------------------------------------------------------------ log dump


def _dump(args: argparse.Namespace) -> int:
    return dump_log(args)


def dump_log(args: argparse.Namespace, describe: Describe | None = None,
             format_rpc: FormatRpc = format_rpc_ids, class_line: str | None = None) -> int:
    """``log dump``: print every entry of the instance's directory; 1 if any is a problem.

    Args:
        describe: what an RPC means to the class that ran the instance (``ambrosia_cli``
            passes it; without it the dump shows method ids).
        format_rpc: how an RPC entry is printed.
        class_line: said under the header, naming the class (text output only).
    """
    reg = registry.load(args.instance_name, args.home)
    version = reg.current_version if args.version is None else args.version
    d = registry.instance_dir(reg, version)
    problems = 0
    if not args.json:
        print(f"instance {reg.instance_name}: {d}")
        if class_line is not None:
            print(class_line)
    for entry in dump_entries(d, reg.committer_id, describe):
        problems += entry["kind"] == "problem"
        print(format_entry(entry, args.json, format_rpc))
    return 1 if problems else 0


def add_log(sub: Any) -> argparse.ArgumentParser:
    """The ``log`` command; returns its ``dump`` parser (``ambrosia_cli`` adds ``--class``)."""
    p = sub.add_parser("log", help="inspect an instance's log")
    logsub = p.add_subparsers(dest="log_command", required=True, metavar="{dump}")
    d = logsub.add_parser("dump", help="every record and checkpoint, with integrity problems")
    d.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance")
    d.add_argument("-v", "--version", type=int, default=None,
                   help="which version's directory (default: the registered current version)")
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    d.set_defaults(handler=_dump)
    return d


COMMANDS: tuple[Callable[[Any], Any], ...] = (
    add_register, add_add_replica, add_ic, add_debug, add_log)


def build_parser(commands: Sequence[Callable[[Any], Any]] = COMMANDS
                 ) -> argparse.ArgumentParser:
    parser = Parser(prog="ambrosia", description="AMBROSIA immortal coordinator and tools")
    parser.add_argument("--home", default=None, help=registry.HOME_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in commands:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return execute(build_parser(), list(sys.argv[1:] if argv is None else argv))


def execute(parser: argparse.ArgumentParser, argv: list[str],
            extra: dict[str, Any] | None = None) -> int:
    """Parse ``argv``, run the command's handler and return its exit code; errors are one
    line on stderr.

    Args:
        extra: attributes set on the parsed arguments before the handler runs (arguments
            split off before parsing, such as ``run``'s).
    """
    try:
        args = parser.parse_args(argv)
        for key, value in (extra or {}).items():
            setattr(args, key, value)
        code = int(args.handler(args))
        sys.stdout.flush()  # here, not at exit, where a closed pipe could not be caught
        return code
    except ArgumentError as err:
        print(f"ambrosia {args.command}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except AmbrosiaError as err:
        print(f"ambrosia: error: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ambrosia log dump ... | head`: the reader has gone, as for any Unix tool.
        if not _stdout_is_broken():
            raise
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _stdout_is_broken() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _discard_stdout() -> None:
    # What is still buffered can go nowhere; the interpreter's final flush would otherwise
    # report the broken pipe once more on the way out.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
