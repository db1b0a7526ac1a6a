"""Repro and upgrade tests as plain functions, and a helper to run immortals in tests.

``repro`` replays an instance's recorded log from checkpoint N with the current code;
``upgrade_test`` converts the checkpoint to VNext and replays with the new code. Both run
``ambrosia debug-instance`` underneath (the real path: the coordinator reads the files the
live run wrote and compares every output with the recorded run's digest) and the binding
in this process, and return the final state and the outputs::

    def test_counter_replays():
        result = repro("counter", Counter, checkpoint=1, home=tmp_path)
        assert result.state.count == 3

A replay whose outputs differ from the recorded run raises ``ReplayDivergenceError``
naming the first sequence id where they diverged.

The log does not hold the instance's configuration (``ctx.config``: ``--config`` and
``--set`` of ``ambrosia run``), so a replay gets it from ``config=`` (default: empty)::

    result = repro("feed", Feed, config={"listen": "127.0.0.1:7100"})

A divergent replay that read ``ctx.config`` names that as the likely cause.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs
from ambrosia_ic import api as coordinator

from ambrosia_core.errors import CoordinatorError, ReplayDivergenceError
from ambrosia_core.processes import Child, kill_process
from ambrosia_core.wire import OutgoingRpc
from ambrosia_py.errors import AlreadyUpgradedError

from ..immortal import Immortal
from ..runtime.cli import free_ports
from ..runtime.engine import Engine
from ..runtime.runner import ImmortalRunner
from . import _upgrades

__all__ = [
    "ImmortalProcess",
    "ReplayResult",
    "checkpoints",
    "repro",
    "start_immortal",
    "upgrade_test",
]

S = TypeVar("S", bound=Immortal)


@attrs.frozen
class ReplayResult(Generic[S]):
    """What a replay produced.

    Attributes:
        state: the immortal instance after the replay (VNext's after an upgrade test).
        outputs: every RPC the binding sent, in order.
        records_replayed: log records the coordinator replayed.
        status: "ok" (outputs match the recorded run) or "unchecked" (nothing recorded).
    """

    state: S
    outputs: list[OutgoingRpc]
    records_replayed: int
    status: str


def repro(instance_name: str, cls: type[S], checkpoint: int | None = None, *,
          home: str | os.PathLike[str] | None = None, idle_timeout: float = 1.5,
          timeout: float = 120.0, config: Mapping[str, Any] | None = None) -> ReplayResult[S]:
    """Replay ``instance_name``'s log from checkpoint ``checkpoint`` with ``cls``: any of
    the checkpoints the coordinator kept (``checkpoints()`` lists them; the registration's
    ``--keep-checkpoints`` says how many), by default the oldest.

    Args:
        config: the instance's ``ctx.config`` during the replay (default: empty); give
            what the recorded run was started with (``--config``, ``--set``), which the
            log does not hold.

    Raises:
        ReplayDivergenceError: the outputs differ from the recorded run's.
        CoordinatorError: debug-instance could not run (no such checkpoint, ...).
    """
    return _debug(instance_name, cls, None, None, checkpoint, home, idle_timeout, timeout,
                  config=config)


def upgrade_test(instance_name: str, cls_current: type[Immortal], cls_next: type[S],
                 convert: Callable[[Any], S] | None = None, checkpoint: int | None = None, *,
                 home: str | os.PathLike[str] | None = None, idle_timeout: float = 1.5,
                 timeout: float = 120.0, config: Mapping[str, Any] | None = None
                 ) -> ReplayResult[S]:
    """Load checkpoint ``checkpoint`` (any kept one, by default the newest) with VCurrent,
    convert it to VNext (``convert`` or ``cls_next.upgrade_from``) and replay the log after
    it with VNext (an upgrade test). The newest by default, so that a test of a
    long-running instance converts the state it has now, not the empty one of its start.

    After a live upgrade to VNext (its checkpoints already hold VNext), the test replays the
    whole history instead: the version before the upgrade from ``checkpoint`` (default: its
    newest kept) converted and replayed with VNext, then the upgraded version's files from
    its first kept checkpoint with VNext; the result holds the final state and every output.
    ``config`` is the instances' ``ctx.config`` (default: empty).

    Raises:
        ReplayDivergenceError: VNext's outputs differ from the recorded run's.
        AlreadyUpgradedError: the instance was upgraded live and no earlier version's
            files are kept (replay the new version with ``repro`` instead).
        CoordinatorError: debug-instance could not run, or no UpgradeService arrived.
    """
    args = (instance_name, cls_current, cls_next, convert)
    version = None
    if checkpoint is not None:
        version = _upgrades.version_of_checkpoint(instance_name, checkpoint, home)
    if version is None or version == _upgrades.current_version(instance_name, home):
        try:
            return _debug(*args, checkpoint, home, idle_timeout, timeout, config=config,
                          newest=True)
        except AlreadyUpgradedError:
            checkpoint = None  # the current version is VNext's: test the upgrade itself
    hist = _upgrades.history(instance_name, version, checkpoint, home, newest=True)
    first = _debug(*args, hist.old_checkpoint, home, idle_timeout, timeout,
                   version=hist.old_version, config=config)
    second = _debug(instance_name, cls_next, None, None, hist.new_checkpoint, home,
                    idle_timeout, timeout, version=hist.new_version, config=config)
    return _upgrades.combine(first, second)


def checkpoints(instance_name: str, home: str | os.PathLike[str] | None = None,
                version: int | None = None) -> list[int]:
    """The numbers of the checkpoints kept for ``instance_name``, oldest first."""
    return coordinator.kept_checkpoints(instance_name, home, version)


def _debug(name: str, cls: type[Immortal], cls_next: type[Immortal] | None,
           convert: Callable[[Any], Any] | None, checkpoint: int | None,
           home: str | os.PathLike[str] | None, idle_timeout: float, timeout: float,
           version: int | None = None, config: Mapping[str, Any] | None = None,
           newest: bool = False) -> Any:
    kept = checkpoints(name, home, version)
    if not kept:
        raise CoordinatorError(f"{name} has no checkpoint to replay from")
    if checkpoint is None:
        checkpoint = kept[-1] if newest else kept[0]
    elif checkpoint not in kept:
        raise CoordinatorError(f"{name} has no checkpoint {checkpoint} to replay from (kept: "
                               f"{', '.join(map(str, kept))})")

    rp, sp = free_ports(2)
    errfile = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed below
    try:
        proc = coordinator.start_debug_instance(
            name, checkpoint, receive_port=rp, send_port=sp, idle_timeout=idle_timeout,
            testing_upgrade=cls_next is not None, version=version, home=home,
            stderr=errfile, timeout=timeout)
    except CoordinatorError as e:
        errfile.seek(0)
        more = errfile.read().strip()  # the reason itself is in the error already
        raise CoordinatorError(f"{e}: {more}" if more else str(e)) from None
    try:
        engine = Engine(cls, name, upgrade_to=cls_next, convert=convert, record_outputs=True,
                        logger=logging.getLogger(f"ambrosia.debug.{name}"), config=config)
        runner = ImmortalRunner(engine, rp, sp, progress=False)
        asyncio.run(asyncio.wait_for(runner.run(), timeout))
        out, _ = proc.communicate(timeout=timeout)
    finally:
        kill_process(proc, group=False)
        errfile.seek(0)
        err = errfile.read()
        errfile.close()
    summary = None
    for line in out.splitlines():
        if line.startswith("{"):
            summary = json.loads(line)
    if summary is None or summary.get("status") == "error":
        detail = summary.get("error") if summary else (err.strip() or f"exit {proc.returncode}")
        raise CoordinatorError(f"debug-instance of {name} checkpoint {checkpoint} failed: "
                               f"{detail}")
    if summary["status"] == "diverged":
        raise _divergence(summary["first_divergence_seq"], summary.get("detail", ""),
                          engine, config)
    if cls_next is not None and type(engine.instance) is not cls_next:
        raise CoordinatorError("the upgrade test ended without switching to "
                               f"{cls_next.__qualname__} (no UpgradeService arrived)")
    return ReplayResult(engine.instance, list(engine.outputs or []),
                        summary["records_replayed"], summary["status"])


def _divergence(seq_id: int, detail: str, engine: Engine,
                config: Mapping[str, Any] | None) -> ReplayDivergenceError:
    """The error for debug-instance's divergence: its detail without the sentence the
    error itself begins with, and the likely cause when the replay read ``ctx.config``
    (outside-world input a replay is given by ``config=``, not by the log)."""
    head = f"{ReplayDivergenceError(seq_id)}: "
    if detail.startswith(head):
        detail = detail[len(head):]
    if engine.config_read:
        if config is None:
            detail += ("; the replay read ctx.config and was given none: pass the recorded "
                       "run's configuration (--config, --set) as repro(..., config=...)")
        else:
            detail += ("; the replay read ctx.config: a config= unlike the recorded run's "
                       "configuration (--config, --set) diverges so")
    return ReplayDivergenceError(seq_id, detail)


class ImmortalProcess(Child):
    """An ``ambrosia run`` process (immortal and its coordinator) for tests and demos: its
    stderr lines are kept (``lines``) and can be awaited (``wait_for``); ``kill()`` is a
    ``kill -9`` of the immortal and its coordinator (the whole process group), as when the
    machine running the service dies; ``stop()`` is an ordinary stop (SIGTERM) that leaves
    nothing of it running either."""

    default_name = "the immortal"


def start_immortal(target: str, instance_name: str, *,
                   home: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None,
                   args: Sequence[str] = (), env: dict[str, str] | None = None,
                   primary: bool = True, timeout: float = 60.0) -> ImmortalProcess:
    """Start ``ambrosia run TARGET -i NAME`` with ``AMBROSIA_HOME=home``; by default wait
    until the instance is primary."""
    child_env = dict(os.environ if env is None else env)
    child_env["AMBROSIA_HOME"] = os.fspath(home)
    child_env["PYTHONUNBUFFERED"] = "1"
    cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (cwd, child_env.get("PYTHONPATH", "")) if p)
    p = ImmortalProcess.start(
        [sys.executable, "-m", "ambrosia_cli", "run", target, "-i", instance_name, *args],
        env=child_env, cwd=cwd, keep_stdout=False)
    if primary:
        try:
            p.wait_for("became primary", timeout)
        except BaseException:
            p.kill()
            raise
    return p


def _path(p: str | os.PathLike[str]) -> Path:
    return Path(os.fspath(p))
