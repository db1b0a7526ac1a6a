"""``ambrosia run MODULE:CLASS --instance-name NAME``: run an immortal.

By default the instance is registered on first use (free ports, logs under
``$AMBROSIA_HOME/logs``, at the version of the class it runs; ``--upgrade-to`` registers an
upgrade to the next class's version) and its coordinator is started here and stopped with
the immortal, so one command runs a service on one machine. SIGTERM and SIGINT stop both
as an ordinary stop. ``--receive-port/--send-port`` connect to an already-running
coordinator instead.

This is the one place that puts the two together: the coordinator package registers and
starts, the binding (``ambrosia_py.runtime.cli``) runs on the two ports it is given.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ambrosia_ic import registry
from ambrosia_ic.commands.afresh import add_start_afresh, prepare_start
from ambrosia_ic.logdir import check_log_dir

from ambrosia_core.errors import AmbrosiaError, UsageError
from ambrosia_core.metrics import add_metrics_option
from ambrosia_core.metrics import check_address as check_metrics_address
from ambrosia_core.metrics import serve as serve_metrics
from ambrosia_core.tls import ENV_CA, ENV_CERT, ENV_KEY, add_tls_options, tls_from_args
from ambrosia_py.runtime import checkpoint as ckpt
from ambrosia_py.runtime import cli as binding
from ambrosia_py.runtime.config import load_config
from ambrosia_py.runtime.runner import ImmortalRunner
from ambrosia_py.runtime.stops import StopSignals

from . import local_coordinator, status_file

__all__ = ["build_parser", "run_main"]

EXIT_ERROR = binding.EXIT_ERROR
PREFIX = "ambrosia run: "
# After a stop signal, how long the coordinator has to stop and close the connection
# before the immortal stops on its own.
_STOP_GRACE_SECONDS = 10.0
# `ambrosia run NAME -i ...` for the services this distribution ships.
SHIPPED = {
    "connectors": "ambrosia_services.connectors:ConnectorCoordinator",
    "kcl": "ambrosia_services.kcl:KclCoordinator",
    "spark": "ambrosia_services.pipeline:SparkCoordinator",
    "wordcount": "ambrosia_services.pipeline:WordCountPipeline",
}


def shipped(target: str) -> str:
    """A shipped service's short name as its ``MODULE:CLASS``; anything else unchanged."""
    return SHIPPED.get(target, target)


def build_parser() -> argparse.ArgumentParser:
    p = binding.Parser(
        prog="ambrosia run", description="Run an immortal.",
        epilog="--config and --set give the instance its configuration (ctx.config); the "
               "keys of the shipped services are in the READMEs of "
               "services/ambrosia_services/: connectors/ (the connector coordinator, at its "
               "end), pipeline/ (the Spark coordinator and the word count) and kcl/ (record "
               "processors).")
    binding.add_arguments(
        p, ports_required=False,
        target_help="the Immortal subclass to run, or a shipped service by name: "
                    + ", ".join(SHIPPED),
        receive_port_help="connect to a running coordinator's receive port (with "
                          "--send-port) instead of starting one",
        send_port_help="that coordinator's send port (with --receive-port)")
    # Word for word the top-level option's help (ambrosia_ic.registry.HOME_HELP).
    p.add_argument("--home", default=None,
                   help="registry directory (default: $AMBROSIA_HOME, else ~/.ambrosia)")
    add_start_afresh(p)
    add_metrics_option(p, "--coordinator-metrics", what="its coordinator's",
                       note="the coordinator ambrosia run starts (one given by "
                            "--receive-port takes --metrics of its own)")
    add_tls_options(p)
    binding.add_log_level(p)
    return p


def run_main(argv: Sequence[str], default_home: str | None = None) -> int:
    """Entry point of ``ambrosia run``; returns the exit code.

    Args:
        argv: the arguments after ``run``.
        default_home: the registry directory given before the sub-command (``ambrosia --home DIR
            run ...``); ``run --home`` overrides it.
    """
    args = build_parser().parse_args(list(argv))
    args.target = shipped(args.target)
    if args.upgrade_to is not None:
        args.upgrade_to = shipped(args.upgrade_to)
    if args.home is None:
        args.home = default_home
    log = binding.setup_logging(args.log_level, args.instance_name)
    with StopSignals() as stops:
        return _run_immortal(args, log, stops)


def _run_immortal(args: argparse.Namespace, log: logging.Logger, stops: StopSignals) -> int:
    started: list[subprocess.Popen[str]] = []
    try:
        code, line = _start_and_run(args, log, stops, started)
    except AmbrosiaError as e:
        if stops.signum is not None:  # e.g. the coordinator got the signal while starting
            code, line = binding.stopped(args.instance_name, stops)
        else:
            code, line = EXIT_ERROR, f"error: {e}"
    finally:
        # Before the last line: whatever the coordinator says while it stops comes first.
        for proc in started:
            local_coordinator.stop(proc)
    print(PREFIX + line, file=sys.stderr, flush=True)
    return code


def _start_and_run(args: argparse.Namespace, log: logging.Logger, stops: StopSignals,
                   started: list[subprocess.Popen[str]]) -> tuple[int, str]:
    """Start the coordinator (unless one is given by its ports; its process goes to
    ``started``) and run the immortal until it stops; returns the exit code and the last
    line to print (after ``ambrosia run: ``).

    Everything that can be refused is refused before anything is written (a registration,
    a directory, a class record, a log): the classes, the configuration as they read it,
    the options, the TLS files, the metrics ports, and the class the instance's newest
    checkpoint holds.
    """
    cls = binding.load_class(args.target)
    config = load_config(args.config, args.sets)
    upgrade_to = binding.load_upgrade_target(args.upgrade_to, cls)
    binding.check_config(config, cls, upgrade_to)
    tls_options = _tls_options(args)
    if (args.receive_port is None) != (args.send_port is None):
        raise UsageError("--receive-port and --send-port go together")
    own_coordinator = args.receive_port is None
    if not own_coordinator and args.coordinator_metrics is not None:
        raise UsageError("--coordinator-metrics goes with the coordinator ambrosia run "
                         "starts, not with --receive-port (give that coordinator "
                         "--metrics)")
    if own_coordinator and args.debug_replay:
        raise UsageError("--debug-replay goes with --receive-port and --send-port "
                         "(the ports `ambrosia debug-instance` listens on)")
    home = registry.ambrosia_home(args.home)
    known = local_coordinator.registered(args.instance_name, home) if own_coordinator else None
    if known is not None:
        _check_checkpoint_class(known, cls, upgrade_to, args, home)
    if own_coordinator and args.coordinator_metrics is not None:
        check_metrics_address(args.coordinator_metrics, "--coordinator-metrics")
    # The binding's metrics are served from here on: a port in use is refused first.
    metrics = serve_metrics(args.metrics)
    try:
        if known is not None:
            prepare_start(known, home, afresh=args.start_afresh,
                          command=f"ambrosia run {args.target} -i {args.instance_name}",
                          warn=log.warning)
        if own_coordinator:
            proc, estimate, config, (rp, sp) = _start_coordinator(
                args, log, stops, started, home, cls, upgrade_to, config, tls_options)
        else:
            proc, estimate, (rp, sp) = None, None, (args.receive_port, args.send_port)
        if stops.signum is not None:
            return binding.stopped(args.instance_name, stops)
        runner = binding.run_immortal(cls, upgrade_to, args.instance_name, (rp, sp), stops,
                                      log, replay_estimate=estimate,
                                      on_stop=_stop_with(proc), on_failure=_stop_first(proc),
                                      config=config, metrics=metrics)
    finally:
        if metrics is not None:
            metrics.close()
    if proc is None:  # a replica's coordinator may have been superseded: start afresh
        binding.start_afresh_if_superseded(PREFIX, args.instance_name, runner, stops)
    return _outcome(args, runner, stops, proc)


def _start_coordinator(args: argparse.Namespace, log: logging.Logger, stops: StopSignals,
                       started: list[subprocess.Popen[str]], home: Path, cls: type[Any],
                       upgrade_to: type[Any] | None, config: Mapping[str, Any],
                       tls_options: list[str],
                       ) -> tuple[subprocess.Popen[str], int | None, Mapping[str, Any],
                                  tuple[int, int]]:
    """Register the instance if it is new (and its upgrade, if asked), record its class
    and status file, and start its coordinator (its process goes to ``started``).
    Returns the process, the replay estimate, the configuration the immortal gets and
    the coordinator's receive and send ports."""
    reg, new = local_coordinator.ensure_registered(args.instance_name, home, log,
                                                   version=cls.version)
    if upgrade_to is not None:
        reg = local_coordinator.register_upgrade(reg, upgrade_to.version, home, log)
    _record_classes(reg, args, home, log)
    config = _with_default_status_file(cls, config, reg)
    _record_status_file(args.instance_name, config, home, log)
    check_log_dir(registry.instance_dir(reg))  # it may have become unusable since
    estimate = local_coordinator.replay_estimate(reg, log)

    def stopping() -> bool:
        return stops.signum is not None

    options = ([] if args.coordinator_metrics is None else
               ["--metrics", str(args.coordinator_metrics)])
    options += tls_options
    if new:
        proc, reg = local_coordinator.start_new(reg, home, log, stopping, options)
    else:
        proc = local_coordinator.start(reg, home, log, stopping, options)
    started.append(proc)
    log.info("started the coordinator (pid %d)", proc.pid)
    return proc, estimate, config, (reg.receive_port, reg.send_port)


def _check_checkpoint_class(reg: registry.Registration, cls: type[Any],
                            upgrade_to: type[Any] | None, args: argparse.Namespace,
                            home: Path) -> None:
    """Refuse a class that cannot load the instance's newest checkpoint, before its class
    record or its registration is touched, naming what to run instead: the class recorded
    for the version it runs, when that is the class the checkpoint holds.

    Raises:
        UsageError: the checkpoint holds another class or version.
    """
    held = local_coordinator.held_class(reg)
    if held is None:
        return  # none yet, or unreadable: the recovery says why
    problem = ckpt.class_problem(held[0], held[1], cls, upgrade_to)
    if problem is None:
        return
    name = reg.instance_name
    try:
        recorded = registry.recorded_class(name, reg.current_version, home)
    except AmbrosiaError:
        recorded = None
    if recorded is not None and recorded[0].partition(":")[2] == held[0]:
        command = f"ambrosia run {recorded[0]} -i {name}"
        if held[1] < cls.version:
            command += f" --upgrade-to {args.target}"
        problem += f": {command}"
    raise UsageError(f"{name}: {problem}")


def _tls_options(args: argparse.Namespace) -> list[str]:
    """The coordinator's TLS options: this command's. The files also become this
    process's ``$AMBROSIA_TLS_*``, which an immortal's configuration without a ``[tls]``
    table takes (``ambrosia_core.tls.tls_from_config``), so one setting covers the
    coordinator's links and the immortal's own connections.

    Raises:
        TlsConfigError: some of the three files without the others, or a file that
            cannot be used.
    """
    tls = tls_from_args(args)
    tls.load()  # files that cannot be used are refused before anything is written
    out = ["--insecure"] if tls.insecure else []
    if tls.enabled:
        assert tls.cert and tls.key and tls.ca
        for name, value in ((ENV_CERT, tls.cert), (ENV_KEY, tls.key), (ENV_CA, tls.ca)):
            os.environ[name] = os.path.abspath(value)
        out += ["--tls-cert", os.environ[ENV_CERT], "--tls-key", os.environ[ENV_KEY],
                "--tls-ca", os.environ[ENV_CA]]
    return out


def _stop_with(proc: subprocess.Popen[str] | None) -> Callable[[ImmortalRunner], None]:
    """What a stop signal does while the immortal runs (called on its event loop)."""
    def stop_coordinator(runner: ImmortalRunner) -> None:
        # The coordinator stops (finishing the write in progress) and closes the
        # connection, which ends the runner; the binding never sees a surprise.
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        asyncio.get_running_loop().call_later(_STOP_GRACE_SECONDS, runner.stop)

    def on_stop(runner: ImmortalRunner) -> None:
        if proc is not None and proc.poll() is None:
            # The side effects end first, while the coordinator still logs their Impulses.
            runner.stop(then=lambda: stop_coordinator(runner))
        else:
            runner.stop()
    return on_stop


def _stop_first(proc: subprocess.Popen[str] | None) -> Callable[[], Awaitable[None]] | None:
    """When the immortal fails (a bad configuration, a handler's or a side effect's error),
    its coordinator is stopped as an ordinary stop before the binding lets go of it: the
    error is then the one line said, not preceded by the coordinator's line about a
    binding that went away."""
    if proc is None:
        return None

    async def stop() -> None:
        await asyncio.to_thread(local_coordinator.stop, proc, _STOP_GRACE_SECONDS)
    return stop


def _outcome(args: argparse.Namespace, runner: ImmortalRunner, stops: StopSignals,
             proc: subprocess.Popen[str] | None) -> tuple[int, str]:
    """The exit code and the one line to end with, once the runner has ended."""
    name = args.instance_name
    if stops.signum is None and runner.closed_by_coordinator and proc is not None:
        # The signal may have reached the coordinator first (sent to the process group):
        # then it says it was stopped, and our own signal is usually on its way.
        if local_coordinator.was_stopped(proc) and stops.signum is None:
            return 0, f"{name} stopped (its coordinator was stopped)"
        if stops.signum is None:
            return EXIT_ERROR, (f"error: the coordinator of {name} stopped "
                                f"({local_coordinator.how_it_ended(proc)})")
    return binding.outcome(name, runner, stops, args.debug_replay)


def _record_classes(reg: registry.Registration, args: argparse.Namespace, home: Path,
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


def _with_default_status_file(cls: type, config: Mapping[str, Any],
                              reg: registry.Registration) -> Mapping[str, Any]:
    """The configuration with ``status_file`` set to ``status.json`` in the instance
    directory when it names none and the class asks for one (``default_status_file``),
    so that ``ambrosia status -i NAME`` works with no configuration at all."""
    if not getattr(cls, "default_status_file", False) or config.get("status_file"):
        return config
    return {**config, "status_file": str(registry.instance_dir(reg) / status_file.DEFAULT_NAME)}


def _record_status_file(name: str, config: Mapping[str, Any], home: Path,
                        log: logging.Logger) -> None:
    """Remember where the instance writes its status (a ``status_file`` key in its
    configuration), for ``ambrosia status -i NAME``. Only a convenience, like the class
    record: if it cannot be written the instance still runs."""
    try:
        status_file.record_status_file(name, config, home)
    except OSError as err:
        log.warning("the status file was not recorded for `ambrosia status` (give it "
                    "--file): %s", err.strerror or err)
