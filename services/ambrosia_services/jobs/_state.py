"""The job protocol's rules as plain data, checked by the tests without any bytes.

- ``LINK_MESSAGES[(sender role, receiver role)]``: the message types that may travel that
  way. A runner-to-runner link carries only stream traffic; ``start``, ``cancel`` and the
  check pair always go through the initiator.
- ``PARTICIPANT_TRANSITIONS[state][input] -> next state``: one job in a runner's job
  table. A missing entry is refused (``next_state``): ``UnexpectedJobMessageError`` for a
  message from the initiator, ``IllegalJobTransitionError`` for a step of the runner's own.
- ``PARTICIPANT_BATCH[state]``: what a runner does with a batch that arrives for a job in
  that state (section 3.5: retain before start, discard after cancel).
- ``INITIATOR_TRANSITIONS`` and ``INITIATOR_BATCH``: the same for the initiator's table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Set
from typing import Final, TypeVar

from .errors import IllegalJobTransitionError, UnexpectedJobMessageError
from .messages import JobId, MessageType


class Role(enum.Enum):
    INITIATOR = "initiator (the coordinator immortal)"
    PARTICIPANT = "participant (a job runner)"


class JobState(enum.Enum):
    """A job as one runner sees it."""

    UNKNOWN = "no start seen (batches are retained), or forgotten"
    STARTED = "start received; the runner is starting it"
    RUNNING = "the runner runs it"
    DONE = "the runner finished it"
    CANCELLED = "cancelled; late batches are discarded"


class JobInput(enum.Enum):
    RECV_START = "start received"
    RECV_CANCEL = "cancel received from the initiator"
    RUNNER_STARTED = "the runner began running the job"
    SEND_BATCH = "the runner sends a batch"
    FINISH = "the runner finished the job"
    CANCEL_LOCALLY = "the runner cancels it (its own request, or the initiator no longer has it)"


class Disposition(enum.Enum):
    """What happens to a batch that arrives for a job."""

    DELIVER = "deliver it to the job now"
    RETAIN = "keep it until the job's start arrives"
    DISCARD = "drop it: the job is over"


class InitiatorState(enum.Enum):
    """A job as the initiator sees it."""

    UNKNOWN = "never started here (or started by a life whose decision was not logged)"
    RUNNING = "start sent to every participant"
    DONE = "every participant ended its result stream"
    CANCELLED = "cancel broadcast to every participant"


class InitiatorInput(enum.Enum):
    SEND_START = "send start to every participant"
    CANCEL = "cancel it (the initiator's own decision)"
    RECV_CANCEL = "a participant asks to cancel it"
    RESULTS_COMPLETE = "the last participant's result stream ended"


LINK_MESSAGES: Final[dict[tuple[Role, Role], frozenset[MessageType]]] = {
    (Role.INITIATOR, Role.PARTICIPANT): frozenset({
        MessageType.START,
        MessageType.CANCEL,
        MessageType.BATCH,
        MessageType.FLOW_CONTROL,
        MessageType.CHECK_RESPONSE,
    }),
    (Role.PARTICIPANT, Role.INITIATOR): frozenset({
        MessageType.CANCEL,
        MessageType.BATCH,
        MessageType.FLOW_CONTROL,
        MessageType.CHECK,
    }),
    (Role.PARTICIPANT, Role.PARTICIPANT): frozenset({
        MessageType.BATCH,
        MessageType.FLOW_CONTROL,
    }),
}

# Short aliases keep the tables readable; deleted below so they are not exported.
S, I = JobState, JobInput  # noqa: E741

PARTICIPANT_TRANSITIONS: Final[dict[JobState, dict[JobInput, JobState]]] = {
    S.UNKNOWN: {
        I.RECV_START: S.STARTED,
        # A cancel can overtake nothing on one ordered link, but a forgotten job's cancel,
        # or the initiator saying it does not know a job we only retained batches for,
        # leaves a tombstone so that later batches are discarded, not retained.
        I.RECV_CANCEL: S.CANCELLED,
        I.CANCEL_LOCALLY: S.CANCELLED,
    },
    S.STARTED: {
        I.RUNNER_STARTED: S.RUNNING,
        I.RECV_CANCEL: S.CANCELLED,
        I.CANCEL_LOCALLY: S.CANCELLED,
    },
    S.RUNNING: {
        I.SEND_BATCH: S.RUNNING,
        I.FINISH: S.DONE,
        I.RECV_CANCEL: S.CANCELLED,
        I.CANCEL_LOCALLY: S.CANCELLED,
    },
    # A cancel that crosses the runner's finish is harmless: the job stays done.
    S.DONE: {I.RECV_CANCEL: S.DONE},
    # The initiator's broadcast reaches the runner that asked for the cancel too.
    S.CANCELLED: {I.RECV_CANCEL: S.CANCELLED, I.CANCEL_LOCALLY: S.CANCELLED},
}

PARTICIPANT_REMOTE_INPUTS: Final = frozenset({I.RECV_START, I.RECV_CANCEL})

PARTICIPANT_BATCH: Final[dict[JobState, Disposition]] = {
    S.UNKNOWN: Disposition.RETAIN,
    S.STARTED: Disposition.DELIVER,
    S.RUNNING: Disposition.DELIVER,
    S.DONE: Disposition.DISCARD,
    S.CANCELLED: Disposition.DISCARD,
}

# Jobs a runner still holds: what it lists in a check.
HELD_STATES: Final = frozenset({S.STARTED, S.RUNNING})

del S, I
IS, II = InitiatorState, InitiatorInput

INITIATOR_TRANSITIONS: Final[dict[InitiatorState, dict[InitiatorInput, InitiatorState]]] = {
    # A request for a job this initiator does not know changes nothing: the runner has
    # already stopped it, and the check pair cleans up what is left.
    IS.UNKNOWN: {II.SEND_START: IS.RUNNING, II.RECV_CANCEL: IS.UNKNOWN},
    IS.RUNNING: {
        II.CANCEL: IS.CANCELLED,
        II.RECV_CANCEL: IS.CANCELLED,
        II.RESULTS_COMPLETE: IS.DONE,
    },
    # Requests that cross the end of the job, or a second participant's request, are
    # answered by nothing (section 3.3: at most one broadcast per job).
    IS.DONE: {II.RECV_CANCEL: IS.DONE},
    IS.CANCELLED: {II.RECV_CANCEL: IS.CANCELLED},
}

INITIATOR_REMOTE_INPUTS: Final = frozenset({II.RECV_CANCEL})

INITIATOR_BATCH: Final[dict[InitiatorState, Disposition]] = {
    # The initiator starts every job itself, so a batch for a job it does not know is
    # not early: it belongs to a job this life never decided on.
    IS.UNKNOWN: Disposition.DISCARD,
    IS.RUNNING: Disposition.DELIVER,
    IS.DONE: Disposition.DISCARD,
    IS.CANCELLED: Disposition.DISCARD,
}

del IS, II


_S = TypeVar("_S", bound=enum.Enum)
_I = TypeVar("_I", bound=enum.Enum)


def next_state(transitions: Mapping[_S, Mapping[_I, _S]], remote: Set[_I], job_id: JobId,
               state: _S, inp: _I) -> _S:
    """Where ``inp`` takes job ``job_id`` from ``state``, by one side's ``transitions``.

    Raises:
        UnexpectedJobMessageError: the table has no entry, and ``inp`` is a message from
            the other side (one of ``remote``).
        IllegalJobTransitionError: the table has no entry for a step of this side's own.
    """
    nxt = transitions[state].get(inp)
    if nxt is None:
        what = f"job {job_id} in state {state.name} ({state.value}) does not allow: {inp.value}"
        if inp in remote:
            raise UnexpectedJobMessageError(what)
        raise IllegalJobTransitionError(what)
    return nxt
