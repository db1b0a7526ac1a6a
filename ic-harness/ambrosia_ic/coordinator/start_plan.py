"""Which flow a standalone coordinator's start runs: a decision from what its directory
holds and what the registry says, with no process, socket or event loop.

``choose_start`` reads the directory (through the recovery reader) and writes nothing:
it answers with a ``StartPlan``, whose cut and lines the shell carries out, or refuses
with one line. The shell (``startup.choose_flow``) and the simulation (``tests/sim``)
both call it, so the simulation's starts take the coordinator's own decision.
``choose_upgrade`` decides, the same way, what a start registered for a live upgrade
does first: finish one that only missed its registration, retry one that died, or let
an instance that never started begin with the new version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs

from ambrosia_core.errors import CoordinatorError

from ..logstore import DIGEST_PREFIX, LOG_PREFIX, checkpoint_temps, file_numbers
from ..recovery import RecoveryPlan, first_start_pending, latest_checkpoint, plan_recovery

__all__ = ["StartPlan", "UpgradePlan", "choose_start", "choose_upgrade"]


@attrs.frozen
class StartPlan:
    """What a start does: recover by ``plan`` (None: a first start), having cut the torn
    tail ``cut`` (``(file, offset)``) off its newest log, and saying ``lines``.
    ``damaged`` are the checkpoints passed over for an older intact one."""

    plan: RecoveryPlan | None
    cut: tuple[Path, int] | None = None
    lines: tuple[str, ...] = ()
    damaged: frozenset[int] = frozenset()


def choose_start(d: Path, cid: int, *, name: str, started: bool,
                 mode: str | None = None) -> StartPlan:
    """The flow a start of instance ``name`` from directory ``d`` runs.

    Args:
        cid: the instance's committer id.
        started: the registry says the instance went live once.
        mode: ``--create-service``: None, ``always-recover`` or ``no-recovery``.

    Raises:
        CoordinatorError: the directory cannot be started from as it is (a history gone,
            a mode that forbids the flow it needs); ``LogCorruptionError`` and
            ``MissingLogError`` (its subclasses) for damage. Nothing was written.
    """
    if first_start_pending(d, cid):
        if started:
            raise _history_gone(name, d)
        leftovers = latest_checkpoint(d) is not None
        if mode == "always-recover":
            raise CoordinatorError(
                f"{name}: --create-service always-recover, but {d} holds no "
                "checkpoint to recover from"
                + (" (only the leftovers of an interrupted first start)" if leftovers
                   else ""))
        said = ("the first start was interrupted before its InitialMessage was logged; "
                "starting afresh")
        return StartPlan(None, lines=(said,) if leftovers else ())
    if mode == "no-recovery":
        raise CoordinatorError(
            f"{name}: --create-service no-recovery, but {d} already holds "
            f"checkpoint {latest_checkpoint(d)}; remove that directory to start afresh")
    plan = plan_recovery(d, cid)
    if plan is None:  # its checkpoints went while this looked
        raise CoordinatorError(f"{name}: the checkpoints of {d} were removed while the "
                               "start read them; start it again")
    lines = [f"{err}; recovering from checkpoint {plan.number} and its logs instead"
             for _, err in plan.damaged]
    cut = None
    if plan.torn is not None:
        cut = plan.torn
        if not plan.torn_zeros:  # zeros past the end are what a live log looks like
            lines.append(f"cutting a torn record off {cut[0]} at offset {cut[1]}")
    return StartPlan(plan, cut, tuple(lines), frozenset(n for n, _ in plan.damaged))


def _history_gone(name: str, d: Path) -> CoordinatorError:
    # Its history is somewhere else (a home copied or moved with its registration naming
    # the old directory, a directory removed or emptied): starting afresh would apply
    # everything again under numbers that were used.
    return CoordinatorError(
        f"{name} has started before, but its log directory {d} holds no log to recover "
        "from (moved, removed or emptied?); register it again with the directory that "
        f"holds its log (ambrosia register-instance -i {name} -l DIR), or start it "
        "afresh on purpose with --start-afresh (ambrosia run, or ambrosia ic beside a "
        "binding of another language)")


@attrs.frozen
class UpgradePlan:
    """What a start registered for a live upgrade to version ``to`` does before its flow:

    - ``finished``: version ``to``'s directory holds a checkpoint, so the upgrade is done
      and only the registration's update was missed: record it, start version ``to``.
    - ``afresh``: the instance never started (its first start is pending): version ``to``
      simply starts afresh.
    - ``retry``: recover the old version with the old code and upgrade again.

    ``remove`` are the new directory's leftovers of an attempt that died before its
    checkpoint (logs and digests, which count only once that checkpoint exists, and the
    temporary file of that checkpoint if its write was cut short); when starting afresh,
    also the temporary checkpoint an interrupted first start left in the old directory,
    which nothing would read again."""

    kind: Literal["finished", "afresh", "retry"]
    to: int
    remove: tuple[Path, ...] = ()


def choose_upgrade(old_dir: Path, new_dir: Path, cid: int, to: int, *, name: str = "",
                   started: bool = False) -> UpgradePlan:
    """The upgrade step of a start of instance ``name`` whose registration asks for
    version ``to``, from the old version's directory ``old_dir`` and the new one's
    ``new_dir``. Reads, writes nothing: the upgrade is done exactly when ``new_dir``
    holds a checkpoint, which is written (durably, by rename) before anything else there
    counts. ``started``: the registry says the instance went live once.

    Raises:
        CoordinatorError: the instance started before, but ``old_dir`` holds no log to
            upgrade from (its history is gone: neither an upgrade nor a first start).
    """
    if latest_checkpoint(new_dir) is not None:
        return UpgradePlan("finished", to)
    remove = tuple(new_dir / f"{prefix}{k}" for prefix in (LOG_PREFIX, DIGEST_PREFIX)
                   for k in file_numbers(new_dir, prefix)) if new_dir.is_dir() else ()
    remove += tuple(checkpoint_temps(new_dir))
    if first_start_pending(old_dir, cid):
        if started:
            raise _history_gone(name, old_dir)
        return UpgradePlan("afresh", to, remove + tuple(checkpoint_temps(old_dir)))
    return UpgradePlan("retry", to, remove)
