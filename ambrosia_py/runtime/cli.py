"""``ambrosia run MODULE:CLASS --instance-name NAME``: run an immortal.

By default the instance is registered on first use (free ports, logs under
``$AMBROSIA_HOME/logs``, at the version of the class it runs; ``--upgrade-to`` registers an
upgrade to the next class's version) and its coordinator is started here and stopped with
the immortal, so one command runs a service on one machine. SIGTERM and SIGINT stop both
as an ordinary stop. ``--ic-receive-port/--ic-send-port``
connect to an already-running coordinator instead.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..errors import AmbrosiaError
from ..immortal import Immortal
from . import local_coordinator
from .engine import Engine
from .runner import ImmortalRunner
from .stops import StopSignals

__all__ = ["free_ports", "load_class", "run_main"]

EXIT_ERROR = 1
EXIT_USAGE = 2
# After a stop signal, how long the coordinator has to stop and close the connection
# before the immortal stops on its own.
_STOP_GRACE_SECONDS = 10.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"ambrosia run: error: {message}\n")


class UsageError(AmbrosiaError):
    """The command line names something that cannot be used."""


def load_class(target: str) -> type[Immortal]:
    """``package.module:ClassName`` -> the Immortal subclass (the current directory is on
    the import path, as for ``python -m``)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{target!r} is not MODULE:CLASS")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UsageError(f"cannot import {module_name!r}: {e}") from None
    except AmbrosiaError:
        raise  # an invalid Immortal class, found at definition: its own message lists why
    except Exception as e:  # the module itself fails: a SyntaxError, its own import code
        raise UsageError(f"cannot import {module_name!r}: {type(e).__name__}: "
                         f"{' '.join(str(e).split())} (`python -c 'import {module_name}'` "
                         "shows the traceback)") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UsageError(f"{module_name} has no {attr!r}")
    if not (isinstance(obj, type) and issubclass(obj, Immortal)):
        raise UsageError(f"{target} is not an ambrosia_py.Immortal subclass")
    return obj


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (held open together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ambrosia run", description="Run an immortal.")
    p.add_argument("target", metavar="MODULE:CLASS", help="the Immortal subclass to run")
    p.add_argument("-i", "--instance-name", required=True,
                   help="the instance's name (registered on first use)")
    p.add_argument("--ic-receive-port", type=int, default=None,
                   help="connect to a running coordinator's receive port (with --ic-send-port) "
                        "instead of starting one")
    p.add_argument("--ic-send-port", type=int, default=None,
                   help="that coordinator's send port (with --ic-receive-port)")
    p.add_argument("--debug-replay", action="store_true",
                   help="the coordinator at --ic-receive-port is `ambrosia debug-instance`: "
                        "its closing the connection after the replay is the normal end")
    p.add_argument("--upgrade-to", metavar="MODULE:CLASS", default=None,
                   help="upgrade live to this class: registers the upgrade to its `version` "
                        "(if the instance runs an older one) and switches to it when the "
                        "coordinator upgrades")
    # Word for word the top-level option's help (ambrosia_ic.registry.HOME_HELP).
    p.add_argument("--home", default=None,
                   help="registry directory (default: $AMBROSIA_HOME, else ~/.ambrosia)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="the lowest level of log line printed on stderr (default INFO)")
    return p


async def _run(runner: ImmortalRunner, stops: StopSignals,
               proc: subprocess.Popen[str] | None) -> None:
    """Run the immortal until its coordinator closes the connection; a stop signal stops
    the coordinator started here (``proc``), or the runner itself if there is none."""
    loop = asyncio.get_running_loop()

    def on_stop() -> None:
        if proc is not None and proc.poll() is None:
            # The coordinator stops first (finishing the write in progress) and closes the
            # connection, which ends the runner; the binding never sees a surprise.
            proc.send_signal(signal.SIGTERM)
            loop.call_later(_STOP_GRACE_SECONDS, runner.stop)
        else:
            runner.stop()

    stops.attach(loop, on_stop)
    try:
        await runner.run()
    finally:
        stops.detach()


def run_main(argv: Sequence[str], default_home: str | None = None) -> int:
    """Entry point of ``ambrosia run``; returns the exit code.

    Args:
        argv: the arguments after ``run``.
        default_home: the registry directory given before the sub-command (``ambrosia --home DIR
            run ...``); ``run --home`` overrides it.
    """
    args = build_parser().parse_args(list(argv))
    if args.home is None:
        args.home = default_home
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")
    log = logging.getLogger(f"ambrosia.{args.instance_name}")
    with StopSignals() as stops:
        return _run_immortal(args, log, stops)


def _run_immortal(args: argparse.Namespace, log: logging.Logger, stops: StopSignals) -> int:
    started: list[subprocess.Popen[str]] = []
    try:
        code, line = _start_and_run(args, log, stops, started)
    except AmbrosiaError as e:
        if stops.signum is not None:  # e.g. the coordinator got the signal while starting
            code, line = _stopped(args.instance_name, stops)
        else:
            code, line = EXIT_ERROR, f"ambrosia run: error: {e}"
    finally:
        # Before the last line: whatever the coordinator says while it stops comes first.
        for proc in started:
            local_coordinator.stop(proc)
    print(line, file=sys.stderr, flush=True)
    return code


def _start_and_run(args: argparse.Namespace, log: logging.Logger, stops: StopSignals,
                   started: list[subprocess.Popen[str]]) -> tuple[int, str]:
    """Start the coordinator (unless one is given by its ports; its process goes to
    ``started``) and run the immortal until it stops; returns the exit code and the last
    line to print."""
    proc: subprocess.Popen[str] | None = None
    estimate: int | None = None
    cls = load_class(args.target)
    upgrade_to = load_class(args.upgrade_to) if args.upgrade_to else None
    if (args.ic_receive_port is None) != (args.ic_send_port is None):
        raise UsageError("--ic-receive-port and --ic-send-port go together")
    if args.ic_receive_port is not None:
        rp, sp = args.ic_receive_port, args.ic_send_port
    else:
        if args.debug_replay:
            raise UsageError("--debug-replay goes with --ic-receive-port and --ic-send-port "
                             "(the ports `ambrosia debug-instance` listens on)")
        from ambrosia_ic import registry
        from ambrosia_ic.logdir import check_log_dir

        home = registry.ambrosia_home(args.home)
        reg = local_coordinator.ensure_registered(args.instance_name, home, log,
                                                  version=cls.version)
        if upgrade_to is not None:
            reg = local_coordinator.register_upgrade(reg, upgrade_to.version, home, log)
        _record_classes(registry, reg, args, home, log)
        check_log_dir(registry.instance_dir(reg))  # it may have become unusable since
        estimate = local_coordinator.replay_estimate(reg, log)
        proc = local_coordinator.start(reg, home, log, lambda: stops.signum is not None)
        started.append(proc)
        log.info("started the coordinator (pid %d)", proc.pid)
        rp, sp = reg.receive_port, reg.send_port
    if stops.signum is not None:
        return _stopped(args.instance_name, stops)
    engine = Engine(cls, args.instance_name, upgrade_to=upgrade_to, logger=log)
    runner = ImmortalRunner(engine, rp, sp, replay_estimate=estimate)
    asyncio.run(_run(runner, stops, proc))
    return _outcome(args, runner, stops, proc)


def _outcome(args: argparse.Namespace, runner: ImmortalRunner, stops: StopSignals,
             proc: subprocess.Popen[str] | None) -> tuple[int, str]:
    """The exit code and the one line to end with, once the runner has ended."""
    name = args.instance_name
    if stops.signum is None and runner.closed_by_coordinator and proc is not None:
        # The signal may have reached the coordinator first (sent to the process group):
        # then it says it was stopped, and our own signal is usually on its way.
        if local_coordinator.was_stopped(proc) and stops.signum is None:
            return 0, f"ambrosia run: {name} stopped (its coordinator was stopped)"
    if stops.signum is not None:
        return _stopped(name, stops)
    conn = runner.engine.conn
    if runner.closed_by_coordinator and args.debug_replay and not conn.is_primary:
        return 0, f"ambrosia run: {name}: the replay ended after {conn.records_replayed} records"
    if runner.closed_by_coordinator and proc is not None:
        return EXIT_ERROR, (f"ambrosia run: error: the coordinator of {name} stopped "
                            f"({local_coordinator.how_it_ended(proc)})")
    if runner.closed_by_coordinator:
        hint = ""
        if not conn.is_primary:
            hint = (f" while the instance was recovering (after {conn.records_replayed} "
                    "records); if it was `ambrosia debug-instance`, that is the end of its "
                    "replay: pass --debug-replay")
        return EXIT_ERROR, (f"ambrosia run: error: the coordinator of {name} closed the "
                            f"connection{hint}")
    return 0, f"ambrosia run: {name} stopped"


def _record_classes(registry: Any, reg: Any, args: argparse.Namespace, home: Path,
                    log: logging.Logger) -> None:
    """Remember which class runs which version, so that ``ambrosia log dump`` can show
    method names and arguments without being told the class. Only a convenience: if it
    cannot be written, the instance still runs and the dump needs ``--class``."""
    try:
        registry.record_class(reg.instance_name, reg.current_version, args.target,
                              os.getcwd(), home)
        if args.upgrade_to and reg.upgrading:
            registry.record_class(reg.instance_name, reg.upgrade_version, args.upgrade_to,
                                  os.getcwd(), home)
    except AmbrosiaError as err:
        log.warning("the class was not recorded for `ambrosia log dump` (give it --class): "
                    "%s", err)


def _stopped(name: str, stops: StopSignals) -> tuple[int, str]:
    return stops.exit_code, f"ambrosia run: {name} stopped ({stops.name})"
