"""The job tables' refusals, exactly: whose fault, which message, and nothing changed."""

from __future__ import annotations

import pytest
from ambrosia_services.jobs import (
    Batch,
    Cancel,
    CheckResponse,
    Deliver,
    Discarded,
    IllegalJobTransitionError,
    InitiatorJobs,
    InitiatorState,
    JobCancelled,
    JobDone,
    JobId,
    JobRecord,
    JobStarted,
    JobState,
    ParticipantJobs,
    Released,
    Retained,
    RetentionLimitError,
    Send,
    Start,
    UnexpectedJobMessageError,
)

from .helpers import INITIATOR, JOB, OTHER, P1, P2

J = str(JOB)  # "00112233-4455-6677-8899-aabbccddeeff/7"
START = Start(JOB, "wordcount", {}, [P1, P2])


def started(state: JobState = JobState.RUNNING) -> ParticipantJobs:
    runner = ParticipantJobs(P1)
    runner.handle(INITIATOR, START)
    if state is JobState.RUNNING:
        runner.running(JOB)
    return runner


# ------------------------------------------------------------------ a runner's table


def test_a_second_start_is_the_initiators_fault() -> None:
    runner = started(JobState.STARTED)
    with pytest.raises(UnexpectedJobMessageError) as err:
        runner.handle(INITIATOR, START)
    assert str(err.value) == (
        f"job {J} in state STARTED (start received; the runner is starting it) does not "
        f"allow: start received"
    )
    assert runner.state(JOB) is JobState.STARTED


def test_a_start_must_come_from_the_jobs_initiator_and_name_this_runner() -> None:
    runner = ParticipantJobs(P1)
    with pytest.raises(UnexpectedJobMessageError) as err:
        runner.handle(P2, START)
    assert str(err.value) == f"start for job {J} came from {P2}, not from its initiator"
    with pytest.raises(UnexpectedJobMessageError) as err:
        runner.handle(INITIATOR, Start(JOB, "wordcount", {}, [P2]))
    assert str(err.value) == f"start for job {J} does not list this runner ({P1})"
    assert runner.state(JOB) is JobState.UNKNOWN


def test_the_runners_own_steps_are_checked() -> None:
    runner = started(JobState.STARTED)
    with pytest.raises(IllegalJobTransitionError) as err:
        runner.finish(JOB)
    assert str(err.value) == (
        f"job {J} in state STARTED (start received; the runner is starting it) does not "
        f"allow: the runner finished the job"
    )
    with pytest.raises(IllegalJobTransitionError, match="does not allow: the runner sends a batch"):
        runner.check_send(JOB)
    runner.running(JOB)
    runner.check_send(JOB)
    runner.finish(JOB)
    with pytest.raises(IllegalJobTransitionError, match=r"in state DONE .* does not allow: the"):
        runner.request_cancel(JOB, 1, "too late")
    assert runner.state(JOB) is JobState.DONE


def test_a_cancel_that_crosses_the_finish_leaves_the_job_done() -> None:
    runner = started()
    runner.finish(JOB)
    assert runner.handle(INITIATOR, Cancel(JOB, INITIATOR, 1, "late")) == []
    assert runner.state(JOB) is JobState.DONE


def test_retention_is_bounded_by_jobs_and_by_bytes() -> None:
    runner = ParticipantJobs(P1, max_retained_jobs=1, max_retained_bytes=10)
    other = JobId(INITIATOR, 8)
    first = Batch(JOB, 0, 0, b"123456")
    assert runner.handle(P2, first) == [Retained(P2, first)]
    with pytest.raises(RetentionLimitError) as err:
        runner.handle(P2, Batch(other, 0, 0, b"x"))
    assert str(err.value) == (
        f"batch for job {other} refused: 1 jobs not started yet already have batches kept "
        f"(limit 1)"
    )
    assert err.value.job_id == other
    with pytest.raises(RetentionLimitError) as err:
        runner.handle(P2, Batch(JOB, 0, 1, b"12345"))
    assert str(err.value) == (
        f"batch for job {J} refused: 5 more bytes would exceed the 10 bytes kept for jobs "
        f"not started yet"
    )
    # Refused batches left nothing behind; one that fits is still kept.
    assert runner.retained_jobs() == (JOB,)
    assert runner.retained_bytes == 6
    fits = Batch(JOB, 0, 1, b"1234")
    assert runner.handle(P2, fits) == [Retained(P2, fits)]
    assert runner.handle(INITIATOR, START) == [
        JobStarted(START), Deliver(P2, first), Deliver(P2, fits)
    ]


def test_a_cancel_before_the_start_drops_kept_batches_and_discards_later_ones() -> None:
    runner = ParticipantJobs(P1)
    early = Batch(JOB, 0, 0, b"early")
    runner.handle(P2, early)
    cancel = Cancel(JOB, INITIATOR, 3, "never mind")
    assert runner.handle(INITIATOR, cancel) == [JobCancelled(cancel)]
    assert runner.retained_bytes == 0
    late = Batch(JOB, 0, 1, b"late")
    assert runner.handle(P2, late) == [Discarded(P2, late)]


def test_ended_jobs_are_remembered_within_a_bound() -> None:
    runner = ParticipantJobs(P1, max_ended=1)
    first, second = JobId(INITIATOR, 1), JobId(INITIATOR, 2)
    for job in (first, second):
        runner.handle(INITIATOR, Cancel(job, INITIATOR, 0, ""))
    late = Batch(second, 0, 0, b"x")
    assert runner.handle(P2, late) == [Discarded(P2, late)]
    # The first was forgotten: its late batch is kept until a check releases it.
    forgotten = Batch(first, 0, 0, b"y")
    assert runner.handle(P2, forgotten) == [Retained(P2, forgotten)]
    assert runner.check(INITIATOR).job_ids == (first,)
    assert runner.handle(INITIATOR, CheckResponse([], [first])) == [Released((first,))]
    assert runner.retained_jobs() == ()


def test_a_check_lists_one_initiators_jobs_only() -> None:
    runner = started()
    foreign = JobId(OTHER, 1)
    runner.handle(OTHER, Start(foreign, "x", {}, [P1]))
    assert runner.check(INITIATOR).job_ids == (JOB,)
    assert runner.check(OTHER).job_ids == (foreign,)
    # A response naming a job this runner does not hold releases nothing.
    assert runner.handle(INITIATOR, CheckResponse([JOB], [JobId(INITIATOR, 99)])) == []
    assert runner.state(JOB) is JobState.RUNNING


def test_a_runners_second_cancel_request_sends_nothing() -> None:
    runner = started()
    assert runner.request_cancel(JOB, 5, "boom") == [Send(INITIATOR, Cancel(JOB, P1, 5, "boom"))]
    assert runner.request_cancel(JOB, 6, "again") == []


# ------------------------------------------------------------------ the initiator's table


def test_job_ids_come_from_the_member_id_and_the_counter() -> None:
    coordinator = InitiatorJobs(INITIATOR, next_local_id=7)
    job, sends = coordinator.start("wordcount", {}, [P1, P2])
    assert job == JOB
    assert sends == [Send(P1, START), Send(P2, START)]
    assert coordinator.next_local_id == 8
    assert coordinator.records() == (JobRecord(JOB, (P1, P2)),)
    # Deterministic: the same state derives the same id, and the same UUID.
    again, _ = InitiatorJobs(INITIATOR, next_local_id=7).start("wordcount", {}, [P1, P2])
    assert again == job and again.uuid == job.uuid


def test_a_counter_that_points_at_a_known_job_is_refused() -> None:
    coordinator = InitiatorJobs(INITIATOR, next_local_id=7, records=[JobRecord(JOB, (P1,))])
    with pytest.raises(IllegalJobTransitionError) as err:
        coordinator.start("wordcount", {}, [P1])
    assert str(err.value) == (
        f"job {J} in state RUNNING (start sent to every participant) does not allow: "
        f"send start to every participant"
    )
    assert coordinator.next_local_id == 7


def test_an_id_the_callers_state_decided_is_used_and_the_counter_moves_past_it() -> None:
    """A coordinator numbers its jobs in handlers and starts them later, on its primary,
    in any order: each start carries the id its state gave it."""
    coordinator = InitiatorJobs(INITIATOR, next_local_id=3)
    job, sends = coordinator.start("wordcount", {}, [P1, P2], local_id=7)
    assert job == JOB and sends == [Send(P1, START), Send(P2, START)]
    assert coordinator.next_local_id == 8
    earlier, _ = coordinator.start("wordcount", {}, [P1], local_id=4)
    assert earlier == JobId(INITIATOR, 4) and coordinator.next_local_id == 8
    with pytest.raises(IllegalJobTransitionError, match="does not allow"):
        coordinator.start("wordcount", {}, [P1], local_id=7)  # known: never started twice
    with pytest.raises(ValueError, match="out of range"):
        coordinator.start("wordcount", {}, [P1], local_id=-1)
    assert [r.job_id.local_id for r in coordinator.records()] == [4, 7]


def test_records_of_another_initiator_are_refused() -> None:
    with pytest.raises(ValueError, match=f"was not started by {INITIATOR}"):
        InitiatorJobs(INITIATOR, records=[JobRecord(JobId(OTHER, 1), (P1,))])


def test_the_job_is_done_when_every_participant_ended_its_result_stream() -> None:
    coordinator = InitiatorJobs(INITIATOR, next_local_id=7)
    coordinator.start("wordcount", {}, [P1, P2])
    b1 = Batch(JOB, 0, 0, b"a", last=True)
    assert coordinator.handle(P1, b1) == [Deliver(P1, b1)]
    side = Batch(JOB, 1, 0, b"", last=True)  # another edge's end does not count
    assert coordinator.handle(P2, side) == [Deliver(P2, side)]
    assert coordinator.state(JOB) is InitiatorState.RUNNING
    b2 = Batch(JOB, 0, 0, b"", last=True)
    assert coordinator.handle(P2, b2) == [Deliver(P2, b2), JobDone(JOB)]
    assert coordinator.state(JOB) is InitiatorState.DONE
    late = Batch(JOB, 0, 1, b"?")
    assert coordinator.handle(P2, late) == [Discarded(P2, late)]
    with pytest.raises(IllegalJobTransitionError, match="in state DONE"):
        coordinator.cancel(JOB, 1, "too late")


def test_messages_from_members_outside_the_job_are_refused() -> None:
    coordinator = InitiatorJobs(INITIATOR, next_local_id=7)
    coordinator.start("wordcount", {}, [P1])
    with pytest.raises(UnexpectedJobMessageError) as err:
        coordinator.handle(P2, Batch(JOB, 0, 0, b"x"))
    assert str(err.value) == (
        f"batch for job {J} from {P2}, which is not one of its participants"
    )
    with pytest.raises(UnexpectedJobMessageError, match="cancel request for job"):
        coordinator.handle(P2, Cancel(JOB, P2, 1, "x"))
    assert coordinator.state(JOB) is InitiatorState.RUNNING


def test_unknown_jobs_batches_are_discarded_and_cancel_requests_ignored() -> None:
    coordinator = InitiatorJobs(INITIATOR)
    stray = Batch(JOB, 0, 0, b"x")
    assert coordinator.handle(P1, stray) == [Discarded(P1, stray)]
    assert coordinator.handle(P1, Cancel(JOB, P1, 1, "x")) == []
    assert coordinator.state(JOB) is InitiatorState.UNKNOWN


def test_a_running_job_cannot_be_forgotten() -> None:
    coordinator = InitiatorJobs(INITIATOR, next_local_id=7)
    coordinator.start("wordcount", {}, [P1])
    with pytest.raises(IllegalJobTransitionError, match="is running; cancel it first"):
        coordinator.forget(JOB)
    coordinator.cancel(JOB, 0, "")
    coordinator.forget(JOB)
    assert coordinator.records() == ()
