"""What the primary's job links decide, with no I/O: which starts to launch and to cancel,
what a runner's cancel, a ``Held`` and a lost start's reconciliation mean for the table.

``JobsLive`` (``live.py``) keeps the sockets, the threads and the timers; it asks a
``LinkPlan`` each question and sends the Impulses and protocol calls the answer names. A
simulated runner world drives the same ``LinkPlan``, so what it tries is what the primary
decides.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ambrosia_services.jobs import RESULT_EDGE, Cancel, JobId
from ambrosia_services.jobs.attempts import Attempt, Reconciled, RunnerCancelCode, plan_params
from ambrosia_services.jobs.link import Held

from .jobtable import JobPhase, JobTable

__all__ = ["CancelMeaning", "Launch", "LinkPlan", "is_loss", "lost_decision"]


def is_loss(error_code: int) -> bool:
    """A runner's refusal that is a loss of the start (a new attempt that does not count
    against ``max_attempts``): the attempt launched before, or Spark Connect failing."""
    try:
        return RunnerCancelCode(error_code).is_loss
    except ValueError:
        return False  # a code of another runner's: its message says what failed


@attrs.frozen
class Launch:
    """One start to give a runner: the protocol call's arguments and whom it is for."""

    key: str
    local_id: int
    attempt: int
    name: str
    params: dict[str, Any]
    runner: str  # the runner's configured address
    member: uuid.UUID  # its member id in the protocol


class CancelMeaning(enum.Enum):
    """What a start a runner cancelled means for the table."""

    IGNORED = "our own cancel, or a start the table no longer knows"
    LOST = "lost by its runner: a new attempt, not counted against max_attempts"
    FAILED = "the attempt failed"


@attrs.frozen
class CancelVerdict:
    meaning: CancelMeaning
    key: str | None = None
    spark_failed: bool = False  # the runner said Spark Connect failed under it


@attrs.frozen
class HeldPlan:
    """The answer to a runner's ``Held``: the starts it runs (``job_started``), the lost
    starts to end on the link, and the lost starts newly to reconcile (local id, key)."""

    started: list[tuple[str, int]]
    cancel: list[JobId]
    reconcile: list[tuple[int, str]]


def lost_decision(verdict: Reconciled, partial: bool) -> tuple[bool, str]:
    """A lost start's reconciliation as ``job_lost``'s (same attempt, why).

    Committed output or finished staging: the same attempt again (the runner streams or
    commits it). Otherwise the same attempt too: only Spark Connect knows whether the
    write runs, and the runner asks it on this start (``partial``: its staging exists)."""
    if verdict in (Reconciled.COMMITTED, Reconciled.FINISHED_STAGING):
        return True, verdict.value
    if verdict is Reconciled.UNKNOWN:
        return True, ("the attempt's staging is partial" if partial else
                      "no staging yet") + ": its runner asks Spark"
    return False, verdict.value


class LinkPlan:
    """The link decisions of one coordinator's primary, for one life of it.

    ``launched``: the local ids given to the link in this life (a start is never given
    twice); ``reconciling``: the lost starts, by local id, each reconciled once."""

    def __init__(self, member: uuid.UUID, members: Mapping[str, uuid.UUID],
                 table: JobTable) -> None:
        self.member = member
        self.members = dict(members)  # the runners configured: address -> member id
        # Every start the state holds may have reached its runner: the runner's check
        # tells which it holds; the others are reconciled.
        self.records = {e.local_id: self.members[table.runner_of(k)]
                        for k, e in table.jobs.items() if table.runner_of(k) in self.members}
        self.launched: set[int] = set(self.records)
        self.reconciling: dict[int, str] = {}

    def key_of(self, table: JobTable, job: JobId) -> str | None:
        if job.initiator != self.member:
            return None
        return table.by_local().get(job.local_id)

    def cancels(self, table: JobTable, running: Callable[[JobId], bool]) -> list[JobId]:
        """The starts the table cancelled that the link still runs."""
        jobs = (JobId(self.member, local) for local in table.cancels)
        return [job for job in jobs if running(job)]

    def launches(self, table: JobTable) -> list[Launch]:
        """The starts the state decided and this life has not given the link yet, oldest
        first; each is counted launched as it is returned."""
        out = []
        for local, key in sorted((e.local_id, k) for k, e in table.jobs.items()
                                 if e.local_id not in self.launched):
            entry = table.jobs[key]
            runner = table.runner_of(key)
            member = self.members.get(runner)
            if member is None:
                continue  # a runner no longer configured: a reconfiguration moves it on
            out.append(Launch(key, local, entry.attempt, entry.name,
                              plan_params(Attempt(key, entry.attempt), entry.args),
                              runner, member))
            self.launched.add(local)
        return out

    def queued_started(self, table: JobTable, runner: uuid.UUID) -> list[tuple[str, int]]:
        """A runner connected and was sent the starts queued for it: they are running."""
        return [(key, entry.local_id) for key, entry in table.jobs.items()
                if self.members.get(table.runner_of(key)) == runner
                and entry.phase is JobPhase.DECIDED and entry.local_id in self.launched]

    def result(self, table: JobTable, job: JobId, edge: int) -> tuple[str | None, bool]:
        """A delivered batch: the job's key (None: not ours) and whether it is a result."""
        key = self.key_of(table, job)
        return key, key is not None and edge == RESULT_EDGE

    def cancelled(self, table: JobTable, cancel: Cancel) -> CancelVerdict:
        """What a cancel the link reports means (the link forgets the start either way)."""
        if cancel.cancelled_by == self.member:
            return CancelVerdict(CancelMeaning.IGNORED)  # our own: the state knows
        spark = cancel.error_code == RunnerCancelCode.CONNECT_FAILED
        key = self.key_of(table, cancel.job_id)
        if key is None:
            return CancelVerdict(CancelMeaning.IGNORED, spark_failed=spark)
        meaning = CancelMeaning.LOST if is_loss(cancel.error_code) else CancelMeaning.FAILED
        return CancelVerdict(meaning, key, spark)

    def held(self, table: JobTable, held: Held) -> HeldPlan:
        """A runner's ``Held``: what it runs is started; what it lost is ended on the link
        and reconciled, once per start however often it is reported."""
        started = [(key, job.local_id) for job in held.active
                   if (key := self.key_of(table, job)) is not None]
        fresh = []
        for job in held.lost:
            key = self.key_of(table, job)
            if key is not None and job.local_id not in self.reconciling:
                self.reconciling[job.local_id] = key
                fresh.append((job.local_id, key))
        return HeldPlan(started, list(held.lost), fresh)
