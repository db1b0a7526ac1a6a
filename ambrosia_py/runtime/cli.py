"""``ambrosia run MODULE:CLASS --instance-name NAME``: run an immortal.

By default the instance is registered on first use (free ports, logs under
``$AMBROSIA_HOME/logs``) and its coordinator is started here and stopped with the immortal,
so one command runs a service on one machine. ``--ic-receive-port/--ic-send-port``
connect to an already-running coordinator instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import importlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..errors import AmbrosiaError, CoordinatorError
from ..immortal import Immortal
from .engine import Engine
from .runner import ImmortalRunner

__all__ = ["free_ports", "load_class", "run_main"]

EXIT_ERROR = 1
EXIT_USAGE = 2
# How long a start waits for the previous run's coordinator to let go of the log lock.
_LOCK_WAIT_SECONDS = 5.0


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
    p.add_argument("--upgrade-to", metavar="MODULE:CLASS", default=None,
                   help="the next version's class, switched to when the coordinator upgrades")
    # Word for word the top-level option's help (ambrosia_ic.registry.HOME_HELP).
    p.add_argument("--home", default=None,
                   help="registry directory (default: $AMBROSIA_HOME, else ~/.ambrosia)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="the lowest level of log line printed on stderr (default INFO)")
    return p


def _ensure_registered(name: str, home: Path, log: logging.Logger) -> Any:
    from ambrosia_ic import registry

    from ..errors import RegistryError

    try:
        return registry.load(name, home)
    except RegistryError:
        if (home / "instances" / f"{name}.json").exists():
            raise
    rp, sp, icp = registry.unregistered_free_ports(3, home)
    reg = registry.register(instance_name=name, receive_port=rp, send_port=sp, ic_port=icp,
                            log_dir=str(home / "logs"), home=home)
    log.info("registered %s (receive port %d, send port %d, logs in %s)", name, rp, sp,
             home / "logs")
    return reg


async def _run(runner: ImmortalRunner) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, runner.stop)
    await runner.run()


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
    proc: subprocess.Popen[str] | None = None
    estimate: int | None = None
    try:
        cls = load_class(args.target)
        upgrade_to = load_class(args.upgrade_to) if args.upgrade_to else None
        if (args.ic_receive_port is None) != (args.ic_send_port is None):
            raise UsageError("--ic-receive-port and --ic-send-port go together")
        if args.ic_receive_port is not None:
            rp, sp = args.ic_receive_port, args.ic_send_port
        else:
            from ambrosia_ic import launch, registry
            from ambrosia_ic.logdir import check_log_dir

            home = registry.ambrosia_home(args.home)
            reg = _ensure_registered(args.instance_name, home, log)
            check_log_dir(registry.instance_dir(reg))  # it may have become unusable since
            estimate = _replay_estimate(reg, log)
            proc = _start_coordinator(launch, reg, home, log)
            log.info("started the coordinator (pid %d)", proc.pid)
            rp, sp = reg.receive_port, reg.send_port
        engine = Engine(cls, args.instance_name, upgrade_to=upgrade_to, logger=log)
        runner = ImmortalRunner(engine, rp, sp, replay_estimate=estimate)
        asyncio.run(_run(runner))
        if runner.closed_by_coordinator:
            print(f"ambrosia run: error: the coordinator of {args.instance_name} closed the "
                  "connection", file=sys.stderr)
            return EXIT_ERROR
        return 0
    except AmbrosiaError as e:
        print(f"ambrosia run: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    finally:
        if proc is not None:
            _stop(proc)


def _replay_estimate(reg: Any, log: logging.Logger) -> int | None:
    """About how many records the coordinator we are about to start will replay, from its
    log files (read before it starts: its recovery ends by removing them)."""
    from ambrosia_ic import recovery, registry

    try:
        est = recovery.estimate_replay(registry.instance_dir(reg))
    except OSError:
        return None
    if est is None:
        return None
    log.info("the log to replay holds %s%d records (%d bytes)", "" if est.exact else "about ",
             est.records, est.log_bytes)
    return est.records


def _start_coordinator(launch: Any, reg: Any, home: Path,
                       log: logging.Logger) -> subprocess.Popen[str]:
    """Start the coordinator; a failure is its own one-line reason, at once.

    One case is waited out: after a crash the previous run's coordinator holds the log
    lock until it notices that its binding is gone and exits, which takes a moment. If the
    lock is still held after that, another coordinator is running the instance.
    """
    from ambrosia_ic.logstore import LOCK_NAME
    from ambrosia_ic.registry import instance_dir

    name = reg.instance_name
    try:
        proc: subprocess.Popen[str] = launch.start_coordinator(name, home=home)
        return proc
    except CoordinatorError:
        lock = instance_dir(reg) / LOCK_NAME
        if not _lock_held(lock):
            raise
    log.warning("the log of %s is locked by another coordinator (the previous run's may "
                "still be exiting); waiting up to %g s for it", name, _LOCK_WAIT_SECONDS)
    deadline = time.monotonic() + _LOCK_WAIT_SECONDS
    while _lock_held(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        proc = launch.start_coordinator(name, home=home)
        return proc
    except CoordinatorError as err:
        if _lock_held(lock):
            raise CoordinatorError(f"{err} (is {name} already running?)") from None
        raise


def _lock_held(path: Path) -> bool:
    """Whether a process holds the flock on ``path`` (probed without waiting)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock we got
    return False


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
