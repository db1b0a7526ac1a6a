"""Mutations of the job table and its links that ``jobs_world`` must find: each is a
wrong version of one function of the real code, patched in for a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ambrosia_services.jobs import Cancel
from ambrosia_services.jobs.attempts import Reconciled
from ambrosia_services.jobs.link import Held
from ambrosia_services.pipeline import linkplan
from ambrosia_services.pipeline.jobtable import JobPhase, JobTable
from ambrosia_services.pipeline.linkplan import CancelMeaning, CancelVerdict, HeldPlan, LinkPlan

__all__ = ["JOBS_MUTANTS"]

_HELD = LinkPlan.held
_CANCELLED = LinkPlan.cancelled
_LOST_DECISION = linkplan.lost_decision


def _batch_any_number(self: JobTable, key: str, local_id: int, number: int, rows: bytes,
                      last: bool) -> bytes | None:
    """A result batch taken whatever its number: one streamed again is added again."""
    entry = self._current(key, local_id)
    if entry is None:
        return None
    entry.phase = JobPhase.RUNNING
    entry.expected = number + 1
    entry.rows += rows
    if not last:
        return None
    result = bytes(entry.rows)
    self._end(key, JobPhase.DONE, "")
    return result


def _lost_forgotten(self: LinkPlan, table: JobTable, held: Held) -> HeldPlan:
    """A runner's lost starts ended on the link but never reconciled."""
    plan = _HELD(self, table, held)
    return HeldPlan(plan.started, plan.cancel, [])


def _committed_is_nothing(verdict: Reconciled, partial: bool) -> tuple[bool, str]:
    """A committed output read as nothing done: a new attempt of a committed job."""
    if verdict is Reconciled.COMMITTED:
        return False, verdict.value
    return _LOST_DECISION(verdict, partial)


def _loss_as_failure(self: LinkPlan, table: JobTable, cancel: Cancel) -> CancelVerdict:
    """A runner's refusal for a loss (Spark lost the write) counted as the job failing."""
    verdict = _CANCELLED(self, table, cancel)
    if verdict.meaning is CancelMeaning.LOST:
        return CancelVerdict(CancelMeaning.FAILED, verdict.key, verdict.spark_failed)
    return verdict


JOBS_MUTANTS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "a result batch delivered again is taken again": (JobTable, "batch", _batch_any_number),
    "a runner's lost start is forgotten": (LinkPlan, "held", _lost_forgotten),
    "a job is relaunched after its commit": (linkplan, "lost_decision",
                                             _committed_is_nothing),
    "a runner's loss counts as a failed attempt": (LinkPlan, "cancelled", _loss_as_failure),
}
