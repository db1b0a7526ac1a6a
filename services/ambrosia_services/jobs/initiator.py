"""The initiator's job table: the jobs the coordinator immortal started, and their ends.

``InitiatorJobs`` derives job ids from its own state (``member_id`` and a counter), so an
immortal that keeps ``records()`` and ``next_local_id`` in its logged state derives the
same ids on replay, and a new primary after a failover is rebuilt with
``InitiatorJobs(member_id, next_local_id=..., records=...)``.

It is fed every message its connections deliver (``handle(source, message)``) and its own
decisions (``start``, ``cancel``); it returns effects and never touches bytes:

- ``start`` sends the job's ``start`` to every participant of its fixed list;
- a participant's cancel request is broadcast to every participant once (section 3.3);
  later requests for the same job are answered by nothing;
- a job is done when every participant has ended its result stream: the stream it sends
  to the initiator on ``RESULT_EDGE``, closed by a ``last`` batch;
- a ``check`` is answered with the checked jobs split into active and inactive, and the
  caller learns (``HeldJobs``) which of them it knows, has ended, or never decided on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from ._state import (
    INITIATOR_BATCH,
    INITIATOR_REMOTE_INPUTS,
    INITIATOR_TRANSITIONS,
    Disposition,
    InitiatorInput,
    InitiatorState,
    next_state,
)
from .effects import Deliver, Discarded, HeldJobs, JobCancelled, JobDone, JobEffect, Send
from .errors import IllegalJobTransitionError, UnexpectedJobMessageError
from .messages import (
    MAX_U64,
    Batch,
    Cancel,
    Check,
    CheckResponse,
    FlowControl,
    JobId,
    JobMessage,
    Start,
)

__all__ = ["RESULT_EDGE", "InitiatorJobs", "JobRecord"]

RESULT_EDGE: Final = 0


def _members(values: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
    return tuple(values)


def _ended(values: Iterable[uuid.UUID]) -> frozenset[uuid.UUID]:
    return frozenset(values)


@attrs.frozen
class JobRecord:
    """What the initiator keeps of one job: enough to rebuild its table after a failover."""

    job_id: JobId
    participants: tuple[uuid.UUID, ...] = attrs.field(converter=_members)
    state: InitiatorState = InitiatorState.RUNNING
    results_ended: frozenset[uuid.UUID] = attrs.field(default=frozenset(), converter=_ended)


class InitiatorJobs:
    """The jobs one initiator started.

    Args:
        member_id: the initiator's member id (the first half of every job id it makes).
        next_local_id: the local id of the next job (the counter kept in logged state).
        records: jobs known from an earlier life (their ``JobRecord``), e.g. after failover.
    """

    def __init__(
        self,
        member_id: uuid.UUID,
        *,
        next_local_id: int = 0,
        records: Iterable[JobRecord] = (),
    ) -> None:
        if not 0 <= next_local_id <= MAX_U64:
            raise ValueError(f"next_local_id {next_local_id} is out of range (0..2**64-1)")
        self.member_id = member_id
        self._next_local_id = next_local_id
        self._jobs: dict[JobId, JobRecord] = {}
        for record in records:
            if record.job_id.initiator != member_id:
                raise ValueError(f"job {record.job_id} was not started by {member_id}")
            self._jobs[record.job_id] = record

    # ------------------------------------------------------------ queries
    @property
    def next_local_id(self) -> int:
        return self._next_local_id

    def state(self, job_id: JobId) -> InitiatorState:
        record = self._jobs.get(job_id)
        return InitiatorState.UNKNOWN if record is None else record.state

    def record(self, job_id: JobId) -> JobRecord | None:
        return self._jobs.get(job_id)

    def records(self) -> tuple[JobRecord, ...]:
        """Every job known, sorted by id (for a snapshot of the logged state)."""
        return tuple(self._jobs[j] for j in sorted(self._jobs))

    def forget(self, job_id: JobId) -> None:
        """Drop an ended job's record (its late messages then meet an unknown job)."""
        if self.state(job_id) is InitiatorState.RUNNING:
            raise IllegalJobTransitionError(f"job {job_id} is running; cancel it first")
        self._jobs.pop(job_id, None)

    # ------------------------------------------------------------ transitions
    def _step(self, job_id: JobId, inp: InitiatorInput) -> InitiatorState:
        return next_state(INITIATOR_TRANSITIONS, INITIATOR_REMOTE_INPUTS, job_id,
                          self.state(job_id), inp)

    def _set(self, job_id: JobId, state: InitiatorState, **changes: Any) -> None:
        record = self._jobs.get(job_id)
        if record is not None:
            self._jobs[job_id] = attrs.evolve(record, state=state, **changes)

    # ------------------------------------------------------------ decisions
    def start(
        self, name: str, params: dict[str, Any], participants: Sequence[uuid.UUID],
        *, local_id: int | None = None,
    ) -> tuple[JobId, list[JobEffect]]:
        """Start a job: a ``start`` for each participant.

        Its local id is the counter's next, or ``local_id`` when the caller's logged state
        decided it (a coordinator immortal numbers its jobs in handlers and starts them
        later, on its primary); the counter then moves past it.

        Raises:
            ValueError, TypeError: the plan, the participant list or the id cannot travel.
            IllegalJobTransitionError: the id is one of a job already known.
        """
        local = self._next_local_id if local_id is None else local_id
        if not 0 <= local <= MAX_U64:
            raise ValueError(f"local id {local} is out of range (0..2**64-1)")
        job = JobId(self.member_id, local)
        start = Start(job, name, params, participants)
        self._step(job, InitiatorInput.SEND_START)
        self._next_local_id = max(self._next_local_id, local + 1)
        self._jobs[job] = JobRecord(job, start.participants)
        return job, [Send(p, start) for p in start.participants]

    def cancel(self, job_id: JobId, error_code: int, message: str) -> list[JobEffect]:
        """Cancel a running job: the initiator is the cancel initiator too (snippet 5).

        Raises:
            IllegalJobTransitionError: the job is not running.
        """
        return self._broadcast(Cancel(job_id, self.member_id, error_code, message),
                               InitiatorInput.CANCEL)

    def _broadcast(self, cancel: Cancel, inp: InitiatorInput) -> list[JobEffect]:
        job = cancel.job_id
        before = self.state(job)
        after = self._step(job, inp)
        if after is before:
            return []
        self._set(job, after)
        record = self._jobs[job]
        return [*(Send(p, cancel) for p in record.participants), JobCancelled(cancel)]

    # ------------------------------------------------------------ messages
    def handle(self, source: uuid.UUID, msg: JobMessage) -> list[JobEffect]:
        """Apply one message that arrived from participant ``source``.

        Raises:
            UnexpectedJobMessageError: a cancel request or batch for a known job from a
                member that is not one of its participants.
        """
        kind = type(msg)
        if kind is Batch:
            return self._batch(source, msg)  # type: ignore[arg-type]
        if kind is Cancel:
            self._check_participant(source, msg.job_id, "cancel request")  # type: ignore[union-attr]
            return self._broadcast(msg, InitiatorInput.RECV_CANCEL)  # type: ignore[arg-type]
        if kind is Check:
            return self._check(source, msg)  # type: ignore[arg-type]
        if kind is FlowControl:
            return []  # credits are the connection's business
        raise UnexpectedJobMessageError(f"an initiator does not handle {kind.__name__}")

    def _check_participant(self, source: uuid.UUID, job_id: JobId, what: str) -> None:
        record = self._jobs.get(job_id)
        if record is not None and source not in record.participants:
            raise UnexpectedJobMessageError(
                f"{what} for job {job_id} from {source}, which is not one of its participants"
            )

    def _batch(self, source: uuid.UUID, batch: Batch) -> list[JobEffect]:
        job = batch.job_id
        self._check_participant(source, job, "batch")
        if INITIATOR_BATCH[self.state(job)] is Disposition.DISCARD:
            return [Discarded(source, batch)]
        effects: list[JobEffect] = [Deliver(source, batch)]
        if batch.edge == RESULT_EDGE and batch.last:
            record = self._jobs[job]
            ended = record.results_ended | {source}
            self._set(job, record.state, results_ended=ended)
            if ended == set(record.participants):
                self._set(job, self._step(job, InitiatorInput.RESULTS_COMPLETE))
                effects.append(JobDone(job))
        return effects

    def _check(self, source: uuid.UUID, check: Check) -> list[JobEffect]:
        active, ended, unknown = [], [], []
        for job in check.job_ids:
            state = self.state(job)
            if state is InitiatorState.RUNNING:
                active.append(job)
            elif state is InitiatorState.UNKNOWN:
                unknown.append(job)
            else:
                ended.append(job)
        response = CheckResponse(active, ended + unknown)
        return [
            Send(source, response),
            HeldJobs(source, tuple(active), tuple(ended), tuple(unknown)),
        ]
