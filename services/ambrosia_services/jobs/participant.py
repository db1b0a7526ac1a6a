"""A runner's job table: which jobs it holds, in which state, and the section 3.5 rules.

``ParticipantJobs`` is fed every message the runner's connections deliver
(``handle(source, message)``) and the runner's own steps (``running``, ``finish``,
``request_cancel``, ``check``); it returns ``effects`` and never touches bytes. The rules:

- a batch for a job whose ``start`` has not arrived is retained (bounded by
  ``max_retained_bytes`` and ``max_retained_jobs``; past them ``RetentionLimitError``)
  and delivered, in arrival order, right after the job's ``JobStarted``;
- a batch for a job that is done or cancelled is discarded;
- a cancel the runner asks for stops the job here at once and goes to the initiator, which
  broadcasts it to every participant (section 3.3's two steps);
- ``check`` lists the jobs held for one initiator; its ``check_response`` releases the
  ones the initiator no longer has.

Ended jobs are remembered (so that their late batches are discarded, not retained) up to
``max_ended``; a batch for a job forgotten past that is retained like an early one until a
check releases it.
"""

from __future__ import annotations

import uuid

import attrs

from ._state import (
    HELD_STATES,
    PARTICIPANT_BATCH,
    PARTICIPANT_REMOTE_INPUTS,
    PARTICIPANT_TRANSITIONS,
    Disposition,
    JobInput,
    JobState,
    next_state,
)
from .effects import (
    Deliver,
    Discarded,
    JobCancelled,
    JobEffect,
    JobStarted,
    Released,
    Retained,
    Send,
)
from .errors import RetentionLimitError, UnexpectedJobMessageError
from .messages import Batch, Cancel, Check, CheckResponse, FlowControl, JobId, JobMessage, Start

__all__ = ["ParticipantJobs"]


@attrs.define
class _Retained:
    """Batches kept for a job not started yet, in arrival order."""

    batches: list[tuple[uuid.UUID, Batch]] = attrs.Factory(list)
    size: int = 0


class ParticipantJobs:
    """One runner's jobs.

    Args:
        member_id: this runner's member id (it must be in a job's participant list).
        max_retained_bytes: row bytes kept, over all jobs, for jobs not started yet.
        max_retained_jobs: jobs not started yet that may have batches kept.
        max_ended: ended jobs remembered, so their late batches are discarded.
    """

    def __init__(
        self,
        member_id: uuid.UUID,
        *,
        max_retained_bytes: int = 64 * 1024 * 1024,
        max_retained_jobs: int = 1024,
        max_ended: int = 4096,
    ) -> None:
        self.member_id = member_id
        self.max_retained_bytes = max_retained_bytes
        self.max_retained_jobs = max_retained_jobs
        self.max_ended = max_ended
        self._states: dict[JobId, JobState] = {}
        self._starts: dict[JobId, Start] = {}
        self._ended: dict[JobId, None] = {}  # insertion-ordered set of DONE/CANCELLED jobs
        self._retained: dict[JobId, _Retained] = {}
        self._retained_bytes = 0

    # ------------------------------------------------------------ queries
    def state(self, job_id: JobId) -> JobState:
        return self._states.get(job_id, JobState.UNKNOWN)

    def start_of(self, job_id: JobId) -> Start | None:
        """The ``start`` of a job held now (None once it ended)."""
        return self._starts.get(job_id)

    @property
    def retained_bytes(self) -> int:
        return self._retained_bytes

    def retained_jobs(self) -> tuple[JobId, ...]:
        return tuple(sorted(self._retained))

    def held(self) -> tuple[JobId, ...]:
        """Jobs started and not ended, sorted."""
        return tuple(sorted(j for j, s in self._states.items() if s in HELD_STATES))

    # ------------------------------------------------------------ transitions
    def _step(self, job_id: JobId, inp: JobInput) -> JobState:
        return next_state(PARTICIPANT_TRANSITIONS, PARTICIPANT_REMOTE_INPUTS, job_id,
                          self.state(job_id), inp)

    def _enter(self, job_id: JobId, state: JobState) -> None:
        self._states[job_id] = state
        if state in (JobState.DONE, JobState.CANCELLED):
            self._starts.pop(job_id, None)
            self._drop_retained(job_id)
            self._ended[job_id] = None
            while len(self._ended) > self.max_ended:
                oldest = next(iter(self._ended))
                del self._ended[oldest]
                del self._states[oldest]

    def _drop_retained(self, job_id: JobId) -> list[tuple[uuid.UUID, Batch]]:
        kept = self._retained.pop(job_id, None)
        if kept is None:
            return []
        self._retained_bytes -= kept.size
        return kept.batches

    # ------------------------------------------------------------ messages
    def handle(self, source: uuid.UUID, msg: JobMessage) -> list[JobEffect]:
        """Apply one message that arrived from member ``source``.

        Raises:
            UnexpectedJobMessageError: a ``start`` for a job already seen, one not sent by
                the job's initiator, or one whose participants do not include this runner.
            RetentionLimitError: an early batch past the retention bounds (refused; the
                table is unchanged).
        """
        kind = type(msg)
        if kind is Batch:
            return self._batch(source, msg)  # type: ignore[arg-type]
        if kind is Start:
            return self._start(source, msg)  # type: ignore[arg-type]
        if kind is Cancel:
            return self._cancel(msg)  # type: ignore[arg-type]
        if kind is CheckResponse:
            return self._check_response(msg)  # type: ignore[arg-type]
        if kind is FlowControl:
            return []  # credits are the connection's business
        raise UnexpectedJobMessageError(f"a participant does not handle {kind.__name__}")

    def _start(self, source: uuid.UUID, start: Start) -> list[JobEffect]:
        job = start.job_id
        if source != job.initiator:
            raise UnexpectedJobMessageError(
                f"start for job {job} came from {source}, not from its initiator"
            )
        if self.member_id not in start.participants:
            raise UnexpectedJobMessageError(
                f"start for job {job} does not list this runner ({self.member_id})"
            )
        self._enter(job, self._step(job, JobInput.RECV_START))
        self._starts[job] = start
        early = self._drop_retained(job)
        return [JobStarted(start), *(Deliver(s, b) for s, b in early)]

    def _cancel(self, cancel: Cancel) -> list[JobEffect]:
        job = cancel.job_id
        before = self.state(job)
        after = self._step(job, JobInput.RECV_CANCEL)
        self._enter(job, after)
        if before is after:
            return []  # already over: the broadcast of our own request, or it finished
        return [JobCancelled(cancel)]

    def _batch(self, source: uuid.UUID, batch: Batch) -> list[JobEffect]:
        job = batch.job_id
        disposition = PARTICIPANT_BATCH[self.state(job)]
        if disposition is Disposition.DELIVER:
            return [Deliver(source, batch)]
        if disposition is Disposition.DISCARD:
            return [Discarded(source, batch)]
        size = len(batch.rows)
        if job not in self._retained and len(self._retained) >= self.max_retained_jobs:
            raise RetentionLimitError(
                f"batch for job {job} refused: {len(self._retained)} jobs not started yet "
                f"already have batches kept (limit {self.max_retained_jobs})",
                job_id=job,
            )
        if self._retained_bytes + size > self.max_retained_bytes:
            raise RetentionLimitError(
                f"batch for job {job} refused: {size} more bytes would exceed the "
                f"{self.max_retained_bytes} bytes kept for jobs not started yet",
                job_id=job,
            )
        kept = self._retained.setdefault(job, _Retained())
        kept.batches.append((source, batch))
        kept.size += size
        self._retained_bytes += size
        return [Retained(source, batch)]

    def _check_response(self, response: CheckResponse) -> list[JobEffect]:
        released = []
        for job in response.inactive:
            if self.state(job) in HELD_STATES or job in self._retained:
                self._enter(job, self._step(job, JobInput.CANCEL_LOCALLY))
                released.append(job)
        return [Released(tuple(released))] if released else []

    # ------------------------------------------------------------ the runner's steps
    def running(self, job_id: JobId) -> None:
        """The runner began running a started job.

        Raises:
            IllegalJobTransitionError: the job is not in state STARTED.
        """
        self._enter(job_id, self._step(job_id, JobInput.RUNNER_STARTED))

    def check_send(self, job_id: JobId) -> None:
        """Refuse a batch from a job that is not running (call before sending it).

        Raises:
            IllegalJobTransitionError: the job is not in state RUNNING.
        """
        self._step(job_id, JobInput.SEND_BATCH)

    def finish(self, job_id: JobId) -> None:
        """The runner finished a running job.

        Raises:
            IllegalJobTransitionError: the job is not in state RUNNING.
        """
        self._enter(job_id, self._step(job_id, JobInput.FINISH))

    def request_cancel(self, job_id: JobId, error_code: int, message: str) -> list[JobEffect]:
        """Cancel a job from this runner: it stops here now, and the request goes to the
        job's initiator, which tells every participant.

        Raises:
            IllegalJobTransitionError: the job is done.
        """
        before = self.state(job_id)
        self._enter(job_id, self._step(job_id, JobInput.CANCEL_LOCALLY))
        if before is JobState.CANCELLED:
            return []  # asked once already
        cancel = Cancel(job_id, self.member_id, error_code, message)
        return [Send(job_id.initiator, cancel)]

    def check(self, initiator: uuid.UUID) -> Check:
        """A ``check`` for ``initiator``: every job of its that this runner holds, started
        or with batches kept, sorted."""
        ids = {j for j in self.held() if j.initiator == initiator}
        ids.update(j for j in self._retained if j.initiator == initiator)
        return Check(sorted(ids))
