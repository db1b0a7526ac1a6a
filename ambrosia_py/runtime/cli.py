"""The binding's own entry point: run an immortal against a coordinator that is already
listening, given its two ports::

    python -m ambrosia_py.runtime MODULE:CLASS -i NAME --receive-port P --send-port Q

The binding knows no coordinator implementation: it speaks the protocol to whatever listens
on those ports (the real ``ImmortalCoordinator``, this project's, or ``ambrosia
debug-instance``). ``ambrosia run`` (the ``ambrosia_cli`` package) registers the instance,
starts a local coordinator and then runs the binding through the functions here.
SIGTERM and SIGINT stop the immortal as an ordinary stop.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AmbrosiaError, UsageError
from ambrosia_core.loops import loop_runner, shorten_slice
from ambrosia_core.metrics import MetricsServer, add_metrics_option
from ambrosia_core.metrics import serve as serve_metrics
from ambrosia_core.ports import free_ports

from .config import load_config
from .engine import Engine
from .metrics import binding_source
from .runner import ImmortalRunner
from .stops import StopSignals

__all__ = ["EXIT_ERROR", "EXIT_USAGE", "add_arguments", "build_parser", "check_config",
           "free_ports", "load_class", "main", "outcome", "run_immortal", "stopped"]

EXIT_ERROR = 1
EXIT_USAGE = 2
PROG = "python -m ambrosia_py.runtime"


class Parser(argparse.ArgumentParser):
    """Argument errors are one line (``PROG: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def load_class(target: str) -> type[Any]:
    """``package.module:ClassName`` -> the immortal class (the current directory is on
    the import path, as for ``python -m``).

    The runtime sits below the programming model, so it knows an immortal class by what
    the ``Immortal`` base class gives every subclass (its method table and serializer)
    rather than by importing ``Immortal``.

    Raises:
        UsageError: ``target`` is not MODULE:CLASS, does not import, or is not an
            ``ambrosia_py.Immortal`` subclass (one line naming it).
    """
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
    if not _is_immortal_class(obj):
        raise UsageError(f"{target} is not an ambrosia_py.Immortal subclass")
    return obj


def _is_immortal_class(obj: Any) -> bool:
    # Every subclass of Immortal gets its own method table and serializer when it is
    # defined; the base class itself has no serializer, so it is refused as well.
    return (isinstance(obj, type)
            and isinstance(obj.__dict__.get("__ambrosia_by_id__"), dict)
            and "__ambrosia_serializer__" in obj.__dict__)


def add_arguments(p: argparse.ArgumentParser, *, receive_port_help: str, send_port_help: str,
                  ports_required: bool,
                  target_help: str = "the Immortal subclass to run") -> None:
    """The options of running an immortal, shared by this entry point and ``ambrosia run``
    (which also starts a coordinator, so the ports are optional there)."""
    p.add_argument("target", metavar="MODULE:CLASS", help=target_help)
    p.add_argument("-i", "--instance-name", required=True,
                   help="the instance's name (registered on first use)")
    # The coordinator's own spellings (register-instance, debug-instance, the real IC's).
    p.add_argument("-rp", "--receive-port", "--receivePort", type=int, default=None,
                   required=ports_required, help=receive_port_help)
    p.add_argument("-sp", "--send-port", "--sendPort", type=int, default=None,
                   required=ports_required, help=send_port_help)
    p.add_argument("--debug-replay", action="store_true",
                   help="the coordinator at --receive-port is `ambrosia debug-instance`: "
                        "its closing the connection after the replay is the normal end")
    p.add_argument("--upgrade-to", metavar="MODULE:CLASS", default=None,
                   help="upgrade live to this class: registers the upgrade to its `version` "
                        "(if the instance runs an older one) and switches to it when the "
                        "coordinator upgrades")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="the instance's configuration, a TOML file (ctx.config)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="sets",
                   help="set one configuration key over the file's (repeatable; KEY may be "
                        "dotted, VALUE is a TOML value or else a string)")
    add_metrics_option(p, what="the binding's (and its immortal's)")


def add_log_level(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="the lowest level of log line printed on stderr (default INFO)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Run an immortal against a coordinator that listens "
                                      "on the given ports.")
    add_arguments(p, receive_port_help="the coordinator's receive port (the binding writes "
                                       "to it)",
                  send_port_help="the coordinator's send port (the binding reads from it)",
                  ports_required=True)
    add_log_level(p)
    return p


def setup_logging(level: str, instance_name: str) -> logging.Logger:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s")
    return logging.getLogger(f"ambrosia.{instance_name}")


def run_immortal(cls: type[Any], upgrade_to: type[Any] | None, name: str,
                 ports: tuple[int, int], stops: StopSignals, log: logging.Logger, *,
                 replay_estimate: int | None = None,
                 on_stop: Callable[[ImmortalRunner], None] | None = None,
                 on_failure: Callable[[], Awaitable[None]] | None = None,
                 config: Mapping[str, Any] | None = None,
                 metrics: Address | MetricsServer | None = None) -> ImmortalRunner:
    """Run the immortal until its coordinator closes the connection or a stop signal
    stops it; returns the runner, which says how it ended.

    Args:
        ports: the coordinator's receive port and send port.
        on_stop: what a stop signal does (default: the runner's ordinary stop); ``ambrosia
            run`` also stops the coordinator it started, once the side effects ended.
        on_failure: awaited when the immortal fails (its error ends the run), before the
            connection closes: ``ambrosia run`` stops its coordinator there, so that it
            ends as stopped rather than saying that its binding went away.
        config: the instance's configuration (``ctx.config``).
        metrics: where to serve the binding's metrics, and its immortal's (None: not),
            or the server already serving there (``ambrosia run`` starts it before it
            writes anything, so that a port in use is refused first); closed at the end.

    Raises:
        MetricsError: the metrics address cannot be listened on.
    """
    run = loop_runner()
    shorten_slice()
    engine = Engine(cls, name, upgrade_to=upgrade_to, logger=log, config=config)
    runner = ImmortalRunner(engine, ports[0], ports[1], replay_estimate=replay_estimate,
                            on_failure=on_failure)
    source = binding_source(engine, replay_estimate)
    if isinstance(metrics, MetricsServer):
        metrics.add(source)
        engine.metrics = metrics
    else:
        engine.metrics = serve_metrics(metrics, [source])
    try:
        run(_run(runner, stops, on_stop))
    finally:
        if engine.metrics is not None:
            engine.metrics.close()
    return runner


async def _run(runner: ImmortalRunner, stops: StopSignals,
               on_stop: Callable[[ImmortalRunner], None] | None) -> None:
    stops.attach(asyncio.get_running_loop(),
                 runner.stop if on_stop is None else lambda: on_stop(runner))
    try:
        await runner.run()
    finally:
        stops.detach()


def outcome(name: str, runner: ImmortalRunner, stops: StopSignals,
            debug_replay: bool) -> tuple[int, str]:
    """The exit code and the last line (after the command's name) once the runner ended."""
    if stops.signum is not None:
        return stopped(name, stops)
    conn = runner.engine.conn
    if runner.closed_by_coordinator and debug_replay and not conn.is_primary:
        return 0, f"{name}: the replay ended after {conn.messages_replayed} messages"
    if runner.closed_by_coordinator:
        hint = ""
        if not conn.is_primary:
            hint = (f" while the instance was recovering (after {conn.messages_replayed} "
                    "messages); if it was `ambrosia debug-instance`, that is the end of its "
                    "replay: pass --debug-replay")
        return EXIT_ERROR, f"error: the coordinator of {name} closed the connection{hint}"
    return 0, f"{name} stopped"


def load_upgrade_target(target: str | None, cls: type[Any]) -> type[Any] | None:
    """The class of ``--upgrade-to`` (None without one), checked to take ``cls``'s state.

    Raises:
        UsageError: as ``load_class``, or the class keeps its state otherwise than ``cls``
            and says nothing of how to convert it (refused before anything changes).
    """
    if not target:
        return None
    upgrade_to = load_class(target)
    problem = upgrade_to.upgrade_problem(cls)
    if problem is not None:
        raise UsageError(
            f"--upgrade-to {target}: {upgrade_to.__qualname__} cannot take the state of "
            f"{cls.__qualname__} as it is: {problem}; define "
            f"{upgrade_to.__qualname__}.upgrade_from(previous) to say how")
    return upgrade_to


def check_config(config: Mapping[str, Any], *classes: type[Any] | None) -> None:
    """Ask each class (the one to run, and the upgrade target, which runs with the same
    configuration once the instance upgrades) to refuse ``config`` before anything is
    started or written.

    Raises:
        UsageError: a class refuses it (its one line).
    """
    for cls in classes:
        if cls is not None:
            cls.check_config(config)


def start_afresh_if_superseded(prefix: str, name: str, runner: ImmortalRunner,
                                stops: StopSignals) -> None:
    """If a newer primary superseded the replica whose coordinator this binding ran with
    (``ambrosia_core.superseded``), replace this process by a fresh run of the same
    command: the immortal's state went past what was committed, and the coordinator,
    a standby now on the same ports, sends it the checkpoint and the log to start from.
    A fresh process holds nothing of the old run (module state included)."""
    if not runner.superseded or stops.signum is not None:
        return
    print(f"{prefix}{name}: its coordinator's replica was superseded by a newer primary "
          "and rejoins as a standby; the immortal starts afresh from the log",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def stopped(name: str, stops: StopSignals) -> tuple[int, str]:
    return stops.exit_code, f"{name} stopped ({stops.name})"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m ambrosia_py.runtime``; returns the exit code."""
    args = build_parser().parse_args(argv)
    log = setup_logging(args.log_level, args.instance_name)
    name = args.instance_name
    with StopSignals() as stops:
        try:
            cls = load_class(args.target)
            upgrade_to = load_upgrade_target(args.upgrade_to, cls)
            config = load_config(args.config, args.sets)
            check_config(config, cls, upgrade_to)
            runner = run_immortal(cls, upgrade_to, name,
                                  (args.receive_port, args.send_port), stops, log,
                                  config=config, metrics=args.metrics)
            start_afresh_if_superseded(f"{PROG}: ", name, runner, stops)
            code, line = outcome(name, runner, stops, args.debug_replay)
        except AmbrosiaError as e:
            code, line = (stopped(name, stops) if stops.signum is not None
                          else (EXIT_ERROR, f"error: {e}"))
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)
    return code
