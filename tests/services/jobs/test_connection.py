"""One connection's rules: ordered streams, nothing after last, byte credits, whose fault."""

from __future__ import annotations

import pytest
from ambrosia_services.jobs import (
    Batch,
    BatchOrderError,
    ConnectionState,
    CreditExceededError,
    DataAfterLastError,
    FlowControl,
    JobConnection,
    JobId,
    JobLocalError,
    Role,
    encode,
)

from .helpers import INITIATOR, JOB, receive_all

WHERE = "stream 00112233-4455-6677-8899-aabbccddeeff/7 edge 0"
BROKEN = "the job connection is broken by an earlier protocol error"


def runner_to_coordinator(credits: int = 100) -> tuple[JobConnection, JobConnection]:
    """(the runner's end, the coordinator's end) of one link."""
    runner = JobConnection(Role.PARTICIPANT, Role.INITIATOR, initial_credits=credits)
    coordinator = JobConnection(Role.INITIATOR, Role.PARTICIPANT, initial_credits=credits)
    return runner, coordinator


# A batch frame is 4 length bytes + 1 type byte + 37 header bytes + its rows, so the
# error offsets below are 43 (after one 1-byte batch), 86 (two) and 45 (one of 3 bytes).


def frames(*batches: Batch) -> bytes:
    return b"".join(encode(b) for b in batches)


def test_a_gap_is_the_peers_fault_and_breaks_the_connection() -> None:
    _, coordinator = runner_to_coordinator()
    data = frames(Batch(JOB, 0, 0, b"a"), Batch(JOB, 0, 2, b"c"))
    with pytest.raises(BatchOrderError) as err:
        receive_all(coordinator, [data])
    assert str(err.value) == (
        f"batch 2 on {WHERE} skips ahead: batch 1 was expected (offset 43, message type 3)"
    )
    assert coordinator.state is ConnectionState.ERROR
    with pytest.raises(JobLocalError, match=BROKEN):
        coordinator.next_event()
    with pytest.raises(JobLocalError, match=BROKEN):
        coordinator.receive_data(b"")
    with pytest.raises(JobLocalError, match=BROKEN):
        coordinator.send(FlowControl(JOB, 0, 1))


def test_a_repeat_is_the_peers_fault() -> None:
    _, coordinator = runner_to_coordinator()
    data = frames(Batch(JOB, 0, 0, b"a"), Batch(JOB, 0, 1, b"b"), Batch(JOB, 0, 1, b"b"))
    with pytest.raises(BatchOrderError) as err:
        receive_all(coordinator, [data])
    assert str(err.value) == (
        f"batch 1 on {WHERE} repeats an earlier batch: batch 2 was expected "
        f"(offset 86, message type 3)"
    )


def test_a_stream_that_does_not_begin_at_zero_is_a_gap() -> None:
    _, coordinator = runner_to_coordinator()
    with pytest.raises(BatchOrderError, match="skips ahead: batch 0 was expected"):
        receive_all(coordinator, [frames(Batch(JOB, 0, 1, b"a"))])


def test_data_after_last_is_the_peers_fault() -> None:
    _, coordinator = runner_to_coordinator()
    data = frames(Batch(JOB, 0, 0, b"a", last=True), Batch(JOB, 0, 1, b"b"))
    with pytest.raises(DataAfterLastError) as err:
        receive_all(coordinator, [data])
    assert str(err.value) == (
        f"batch 1 on {WHERE} after its last batch (offset 43, message type 3)"
    )


def test_sending_past_the_credit_is_refused_locally_and_changes_nothing() -> None:
    runner, coordinator = runner_to_coordinator(credits=4)
    wire = runner.send(Batch(JOB, 0, 0, b"abcd"))
    assert runner.send_credit(JOB, 0) == 0
    with pytest.raises(JobLocalError) as err:
        runner.send(Batch(JOB, 0, 1, b"e"))
    assert str(err.value) == (
        f"batch 1 on {WHERE} carries 1 bytes; only 0 were granted: wait for flow control"
    )
    assert runner.state is ConnectionState.OPEN
    # The receiver consumes the 4 bytes and grants 3: the refused batch may go now.
    assert receive_all(coordinator, [wire]) == [Batch(JOB, 0, 0, b"abcd")]
    assert coordinator.receive_credit(JOB, 0) == 0
    grant = coordinator.send(FlowControl(JOB, 0, 3))
    assert coordinator.receive_credit(JOB, 0) == 3
    assert receive_all(runner, [grant]) == [FlowControl(JOB, 0, 3)]
    assert runner.send_credit(JOB, 0) == 3
    wire = runner.send(Batch(JOB, 0, 1, b"e"))
    assert runner.send_credit(JOB, 0) == 2
    assert receive_all(coordinator, [wire]) == [Batch(JOB, 0, 1, b"e")]
    assert coordinator.receive_credit(JOB, 0) == 2


def test_a_peer_that_sends_past_the_credit_breaks_the_connection() -> None:
    _, coordinator = runner_to_coordinator(credits=4)
    data = frames(Batch(JOB, 0, 0, b"abc"), Batch(JOB, 0, 1, b"de"))
    with pytest.raises(CreditExceededError) as err:
        receive_all(coordinator, [data])
    assert str(err.value) == (
        f"batch 1 on {WHERE} carries 2 bytes; only 1 were granted (offset 45, message type 3)"
    )


def test_credit_and_numbers_are_per_stream_and_per_direction() -> None:
    other_job = JobId(INITIATOR, 8)
    a = JobConnection(Role.PARTICIPANT, Role.PARTICIPANT, initial_credits=2)
    b = JobConnection(Role.PARTICIPANT, Role.PARTICIPANT, initial_credits=2)
    sent = [
        Batch(JOB, 0, 0, b"xx"),
        Batch(JOB, 1, 0, b"yy"),  # another edge: its own numbers and credit
        Batch(other_job, 0, 0, b"zz"),  # another job
    ]
    wire = b"".join(a.send(m) for m in sent)
    # The opposite direction of the same (job, edge) is a stream of its own.
    back = b.send(Batch(JOB, 0, 0, b"ww", last=True))
    assert receive_all(b, [wire]) == sent
    assert receive_all(a, [back]) == [Batch(JOB, 0, 0, b"ww", last=True)]
    assert [a.send_credit(JOB, 0), a.send_credit(JOB, 1), a.send_credit(other_job, 0)] == [0, 0, 0]
    assert b.send_credit(JOB, 0) == 0


def test_local_batch_numbers_and_last_are_checked_before_any_byte() -> None:
    runner, _ = runner_to_coordinator()
    with pytest.raises(JobLocalError) as err:
        runner.send(Batch(JOB, 0, 1, b"a"))
    assert str(err.value) == f"batch 1 on {WHERE} skips ahead: batch 0 was expected"
    runner.send(Batch(JOB, 0, 0, b"a", last=True))
    with pytest.raises(JobLocalError) as closed:
        runner.send(Batch(JOB, 0, 1, b"b"))
    assert str(closed.value) == f"batch 1 on {WHERE} after its last batch"
    assert runner.state is ConnectionState.OPEN


def test_a_grant_that_crosses_the_last_batch_is_ignored() -> None:
    runner, coordinator = runner_to_coordinator(credits=1)
    wire = runner.send(Batch(JOB, 0, 0, b"a", last=True))
    grant = coordinator.send(FlowControl(JOB, 0, 5))  # sent before the last batch arrived
    assert receive_all(runner, [grant]) == [FlowControl(JOB, 0, 5)]
    assert runner.send_credit(JOB, 0) == 0
    assert receive_all(coordinator, [wire]) == [Batch(JOB, 0, 0, b"a", last=True)]


def test_a_released_jobs_late_batches_pass_unchecked() -> None:
    runner, coordinator = runner_to_coordinator(credits=1)
    early = runner.send(Batch(JOB, 0, 0, b"a"))
    assert receive_all(coordinator, [early]) == [Batch(JOB, 0, 0, b"a")]
    coordinator.release_job(JOB)
    # The runner had not heard of the release: it goes on (any number, any size).
    late = frames(Batch(JOB, 0, 5, b"late bytes"), Batch(JOB, 0, 5, b"again"))
    assert receive_all(coordinator, [late]) == [
        Batch(JOB, 0, 5, b"late bytes"),
        Batch(JOB, 0, 5, b"again"),
    ]
    assert coordinator.state is ConnectionState.OPEN
    runner.release_job(JOB)
    with pytest.raises(JobLocalError, match="the job was released"):
        runner.send(Batch(JOB, 0, 1, b"b"))


def test_released_jobs_are_remembered_within_a_bound() -> None:
    conn = JobConnection(Role.INITIATOR, Role.PARTICIPANT, max_released=2)
    for local in range(3):
        conn.release_job(JobId(INITIATOR, local))
    # The oldest was forgotten: its batches are checked again (batch 3 is a gap).
    with pytest.raises(BatchOrderError):
        receive_all(conn, [encode(Batch(JobId(INITIATOR, 0), 0, 3, b""))])


def test_a_link_between_two_coordinators_does_not_exist() -> None:
    with pytest.raises(ValueError, match="no job protocol link between INITIATOR and INITIATOR"):
        JobConnection(Role.INITIATOR, Role.INITIATOR)


def test_send_refuses_what_is_not_a_message() -> None:
    runner, _ = runner_to_coordinator()
    with pytest.raises(TypeError, match="not a job protocol message: str"):
        runner.send("batch")  # type: ignore[arg-type]
