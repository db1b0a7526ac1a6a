"""The job protocol's tables, checked as data: no bytes, no connection, no job table."""

from __future__ import annotations

from collections import deque

from ambrosia_services.jobs import (
    HELD_STATES,
    INITIATOR_BATCH,
    INITIATOR_TRANSITIONS,
    LINK_MESSAGES,
    PARTICIPANT_BATCH,
    PARTICIPANT_TRANSITIONS,
    Disposition,
    InitiatorInput,
    InitiatorState,
    JobInput,
    JobState,
    MessageType,
    Role,
)

S, I = JobState, JobInput  # noqa: E741
IS, II = InitiatorState, InitiatorInput
M = MessageType

# Every legal move of a runner's job, written out from section 3 and our adaptation.
PARTICIPANT_DOCUMENTED = {
    (S.UNKNOWN, I.RECV_START): S.STARTED,
    (S.UNKNOWN, I.RECV_CANCEL): S.CANCELLED,
    (S.UNKNOWN, I.CANCEL_LOCALLY): S.CANCELLED,
    (S.STARTED, I.RUNNER_STARTED): S.RUNNING,
    (S.STARTED, I.RECV_CANCEL): S.CANCELLED,
    (S.STARTED, I.CANCEL_LOCALLY): S.CANCELLED,
    (S.RUNNING, I.SEND_BATCH): S.RUNNING,
    (S.RUNNING, I.FINISH): S.DONE,
    (S.RUNNING, I.RECV_CANCEL): S.CANCELLED,
    (S.RUNNING, I.CANCEL_LOCALLY): S.CANCELLED,
    (S.DONE, I.RECV_CANCEL): S.DONE,
    (S.CANCELLED, I.RECV_CANCEL): S.CANCELLED,
    (S.CANCELLED, I.CANCEL_LOCALLY): S.CANCELLED,
}

INITIATOR_DOCUMENTED = {
    (IS.UNKNOWN, II.SEND_START): IS.RUNNING,
    (IS.UNKNOWN, II.RECV_CANCEL): IS.UNKNOWN,
    (IS.RUNNING, II.CANCEL): IS.CANCELLED,
    (IS.RUNNING, II.RECV_CANCEL): IS.CANCELLED,
    (IS.RUNNING, II.RESULTS_COMPLETE): IS.DONE,
    (IS.DONE, II.RECV_CANCEL): IS.DONE,
    (IS.CANCELLED, II.RECV_CANCEL): IS.CANCELLED,
}


def flatten(table: dict) -> dict:  # type: ignore[type-arg]
    return {(s, i): n for s, row in table.items() for i, n in row.items()}


def reachable(table: dict, start: object) -> set[object]:  # type: ignore[type-arg]
    seen = {start}
    todo = deque([start])
    while todo:
        for nxt in table[todo.popleft()].values():
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_participant_table_is_exactly_the_documented_one() -> None:
    assert set(PARTICIPANT_TRANSITIONS) == set(JobState)
    assert flatten(PARTICIPANT_TRANSITIONS) == PARTICIPANT_DOCUMENTED


def test_initiator_table_is_exactly_the_documented_one() -> None:
    assert set(INITIATOR_TRANSITIONS) == set(InitiatorState)
    assert flatten(INITIATOR_TRANSITIONS) == INITIATOR_DOCUMENTED


def test_a_job_starts_exactly_once() -> None:
    # Only UNKNOWN accepts a start: a second start is refused in every other state.
    for table, start in (
        (PARTICIPANT_TRANSITIONS, I.RECV_START),
        (INITIATOR_TRANSITIONS, II.SEND_START),
    ):
        accepting = {s for s, row in table.items() if start in row}  # type: ignore[attr-defined]
        assert accepting == {S.UNKNOWN} or accepting == {IS.UNKNOWN}


def test_the_runners_path_is_start_running_then_done_or_cancelled() -> None:
    assert reachable(PARTICIPANT_TRANSITIONS, S.UNKNOWN) == set(JobState)
    # Ended states never lead back to a live one.
    for ended in (S.DONE, S.CANCELLED):
        assert reachable(PARTICIPANT_TRANSITIONS, ended) == {ended}
    # Only a running job may send batches or finish.
    for inp in (I.SEND_BATCH, I.FINISH):
        assert {s for s, row in PARTICIPANT_TRANSITIONS.items() if inp in row} == {S.RUNNING}


def test_cancel_is_accepted_in_every_state_so_a_broadcast_never_breaks_a_runner() -> None:
    assert all(I.RECV_CANCEL in row for row in PARTICIPANT_TRANSITIONS.values())
    assert all(II.RECV_CANCEL in row for row in INITIATOR_TRANSITIONS.values())


def test_the_initiator_broadcasts_a_cancel_at_most_once() -> None:
    # A broadcast happens on a change of state into CANCELLED, which only RUNNING allows.
    into_cancelled = {
        s for (s, _i), n in INITIATOR_DOCUMENTED.items() if n is IS.CANCELLED and s is not n
    }
    assert into_cancelled == {IS.RUNNING}


def test_batch_dispositions_follow_section_3_5() -> None:
    assert PARTICIPANT_BATCH == {
        S.UNKNOWN: Disposition.RETAIN,  # may be early: retained until start
        S.STARTED: Disposition.DELIVER,
        S.RUNNING: Disposition.DELIVER,
        S.DONE: Disposition.DISCARD,
        S.CANCELLED: Disposition.DISCARD,  # late: discarded
    }
    assert INITIATOR_BATCH == {
        IS.UNKNOWN: Disposition.DISCARD,
        IS.RUNNING: Disposition.DELIVER,
        IS.DONE: Disposition.DISCARD,
        IS.CANCELLED: Disposition.DISCARD,
    }
    assert {S.STARTED, S.RUNNING} == HELD_STATES


def test_which_messages_travel_on_which_link() -> None:
    assert {
        (Role.INITIATOR, Role.PARTICIPANT): {
            M.START, M.CANCEL, M.BATCH, M.FLOW_CONTROL, M.CHECK_RESPONSE,
        },
        (Role.PARTICIPANT, Role.INITIATOR): {M.CANCEL, M.BATCH, M.FLOW_CONTROL, M.CHECK},
        (Role.PARTICIPANT, Role.PARTICIPANT): {M.BATCH, M.FLOW_CONTROL},
    } == LINK_MESSAGES
    # Every message type travels somewhere, and stream traffic travels everywhere.
    assert set().union(*LINK_MESSAGES.values()) == set(MessageType)
    assert all({M.BATCH, M.FLOW_CONTROL} <= kinds for kinds in LINK_MESSAGES.values())
