"""An initiator and two runners, joined in memory with real connections and real bytes,
play out the protocol's flows and races end to end: a job run under flow control to done;
a runner's cancel going through the initiator to everyone; a batch that overtakes its
job's start (retained, then delivered); a batch that arrives after the cancel (discarded);
and check/check_response after the initiator fails over."""

from __future__ import annotations

from collections import Counter

from ambrosia_services.jobs import (
    RESULT_EDGE,
    Batch,
    Cancel,
    Check,
    CheckResponse,
    Deliver,
    Discarded,
    FlowControl,
    HeldJobs,
    InitiatorJobs,
    InitiatorState,
    JobCancelled,
    JobDone,
    JobId,
    JobStarted,
    JobState,
    ParticipantJobs,
    Released,
    Retained,
    Start,
)

from .cluster import Cluster
from .helpers import INITIATOR, P1, P2

TEXT = "the cat saw the dog and the dog saw a cat run"


def make(credits: int = 8) -> tuple[Cluster, InitiatorJobs, ParticipantJobs, ParticipantJobs]:
    coordinator = InitiatorJobs(INITIATOR)
    p1, p2 = ParticipantJobs(P1), ParticipantJobs(P2)
    return Cluster(coordinator, [p1, p2], credits), coordinator, p1, p2


def word_count(start: Start, me: object) -> list[bytes]:
    """The runner's job: count its share of the words (every n-th, by its place in the
    participant list), one result row per word, sorted."""
    words = start.params["text"].split()
    n = len(start.participants)
    mine = words[start.participants.index(me) :: n]  # type: ignore[arg-type]
    return [f"{w} {c}\n".encode() for w, c in sorted(Counter(mine).items())]


def start_everywhere(cluster: Cluster, name: str = "wordcount") -> tuple[JobId, Start]:
    job, sends = cluster.initiator.start(name, {"text": TEXT}, [P1, P2])
    cluster.apply(INITIATOR, sends)
    start = sends[0].message
    assert isinstance(start, Start)
    return job, start


def test_a_job_runs_to_done_under_flow_control() -> None:
    cluster, coordinator, p1, p2 = make(credits=8)
    job, start = start_everywhere(cluster)
    assert cluster.deliver(INITIATOR, P1, one_byte_at_a_time=True) == [JobStarted(start)]
    assert cluster.deliver(INITIATOR, P2) == [JobStarted(start)]
    outputs = {}
    for runner in (p1, p2):
        runner.running(job)
        outputs[runner.member_id] = word_count(start, runner.member_id)
    pending = {member: list(rows) for member, rows in outputs.items()}
    numbers = dict.fromkeys(pending, 0)
    stalls = 0
    received: list[bytes] = []
    effects_seen: list[object] = []
    for _round in range(100):
        for member, rows in pending.items():
            conn = cluster.conn(member, INITIATOR)
            # Send while the credit lasts; the rows of a runner's last batch end its stream.
            while rows and len(rows[0]) <= conn.send_credit(job, RESULT_EDGE):
                cluster.tables[member].check_send(job)  # type: ignore[union-attr]
                row = rows.pop(0)
                batch = Batch(job, RESULT_EDGE, numbers[member], row, last=not rows)
                cluster.send(member, INITIATOR, batch)
                numbers[member] += 1
            stalls += bool(rows)
        for member in pending:
            for effect in cluster.deliver(member, INITIATOR, one_byte_at_a_time=True):
                effects_seen.append(effect)
                if isinstance(effect, Deliver):
                    received.append(effect.batch.rows)
                    # The coordinator consumed the rows: grant their bytes back.
                    if not effect.batch.last:
                        grant = FlowControl(job, RESULT_EDGE, len(effect.batch.rows))
                        cluster.send(INITIATOR, member, grant)
            cluster.deliver(INITIATOR, member)
        if any(isinstance(e, JobDone) for e in effects_seen):
            break
    assert effects_seen[-1] == JobDone(job)
    assert sum(isinstance(e, JobDone) for e in effects_seen) == 1
    assert stalls > 0  # credit, not the row count, paced the runners
    assert sorted(received) == sorted(outputs[P1] + outputs[P2])
    total: Counter[str] = Counter()
    for row in received:
        word, count = row.decode().split()
        total[word] += int(count)
    assert total == Counter(TEXT.split())
    assert coordinator.state(job) is InitiatorState.DONE
    for runner in (p1, p2):
        runner.finish(job)
        assert runner.state(job) is JobState.DONE
        assert runner.held() == ()


def test_a_runners_cancel_goes_through_the_initiator_to_everyone() -> None:
    cluster, coordinator, p1, p2 = make()
    job, _ = start_everywhere(cluster)
    for member, runner in ((P1, p1), (P2, p2)):
        cluster.deliver(INITIATOR, member)
        runner.running(job)
    # P2 fails: it stops the job at once and asks the initiator to cancel it.
    cluster.apply(P2, p2.request_cancel(job, 13, "out of memory"))
    assert p2.state(job) is JobState.CANCELLED
    # P1 fails too, at the same time: its request crosses P2's.
    cluster.apply(P1, p1.request_cancel(job, 14, "disk full"))
    request = Cancel(job, P2, 13, "out of memory")
    # The initiator broadcasts the first request it gets, to every participant...
    assert cluster.deliver(P2, INITIATOR) == [JobCancelled(request)]
    assert coordinator.state(job) is InitiatorState.CANCELLED
    # ...and answers the crossing request with nothing.
    assert cluster.deliver(P1, INITIATOR) == []
    assert cluster.deliver(INITIATOR, P1) == []  # P1 had already stopped
    assert cluster.deliver(INITIATOR, P2) == []
    cancels = [(s, d, m) for s, d, m in cluster.sent if isinstance(m, Cancel)]
    assert cancels == [
        (P2, INITIATOR, request),
        (P1, INITIATOR, Cancel(job, P1, 14, "disk full")),
        (INITIATOR, P1, request),
        (INITIATOR, P2, request),
    ]
    # At most 2N cancel messages for N participants (section 3.3).
    assert len(cancels) <= 2 * 2


def test_a_cancel_from_one_runner_reaches_a_runner_that_did_not_ask() -> None:
    cluster, _, p1, p2 = make()
    job, _ = start_everywhere(cluster)
    for member, runner in ((P1, p1), (P2, p2)):
        cluster.deliver(INITIATOR, member)
        runner.running(job)
    cluster.apply(P2, p2.request_cancel(job, 13, "out of memory"))
    request = Cancel(job, P2, 13, "out of memory")
    assert cluster.deliver(P2, INITIATOR) == [JobCancelled(request)]
    assert p1.state(job) is JobState.RUNNING
    assert cluster.deliver(INITIATOR, P1) == [JobCancelled(request)]
    assert p1.state(job) is JobState.CANCELLED
    assert cluster.deliver(INITIATOR, P2) == []


def test_a_batch_before_its_start_is_retained_then_delivered() -> None:
    # Snippet 14: the initiator's start reaches P2 first; P2 sends to P1 at once.
    cluster, _, p1, p2 = make(credits=64)
    job, start = start_everywhere(cluster)
    assert cluster.deliver(INITIATOR, P2) == [JobStarted(start)]
    p2.running(job)
    early = [Batch(job, 1, 0, b"early rows"), Batch(job, 1, 1, b"more")]
    for batch in early:
        p2.check_send(job)
        cluster.send(P2, P1, batch)
    assert cluster.deliver(P2, P1, one_byte_at_a_time=True) == [
        Retained(P2, early[0]),
        Retained(P2, early[1]),
    ]
    assert p1.state(job) is JobState.UNKNOWN
    assert p1.retained_bytes == 14
    assert p1.retained_jobs() == (job,)
    # Retained rows are not consumed, so no credit comes back: the sender is held back.
    assert cluster.conn(P2, P1).send_credit(job, 1) == 64 - 14
    # The start arrives: the job starts, and the kept batches follow in their order.
    assert cluster.deliver(INITIATOR, P1) == [
        JobStarted(start),
        Deliver(P2, early[0]),
        Deliver(P2, early[1]),
    ]
    assert p1.retained_bytes == 0
    assert p1.retained_jobs() == ()
    later = Batch(job, 1, 2, b"on time", last=True)
    cluster.send(P2, P1, later)
    assert cluster.deliver(P2, P1) == [Deliver(P2, later)]


def test_a_batch_after_the_cancel_is_discarded() -> None:
    # Snippet 13: the cancel reaches P1 before a batch P2 sent while still running.
    cluster, coordinator, p1, p2 = make()
    job, _ = start_everywhere(cluster)
    for member, runner in ((P1, p1), (P2, p2)):
        cluster.deliver(INITIATOR, member)
        runner.running(job)
    stale = Batch(job, 1, 0, b"stale")
    cluster.send(P2, P1, stale)  # in flight
    cancel = Cancel(job, INITIATOR, 1, "user asked")
    assert cluster.apply(INITIATOR, coordinator.cancel(job, 1, "user asked")) == [
        JobCancelled(cancel)
    ]
    assert cluster.deliver(INITIATOR, P1) == [JobCancelled(cancel)]
    assert cluster.deliver(P2, P1) == [Discarded(P2, stale)]
    assert p1.retained_jobs() == ()
    assert cluster.deliver(INITIATOR, P2) == [JobCancelled(cancel)]
    # A runner may not send for a cancelled job.
    assert p2.state(job) is JobState.CANCELLED


def test_check_after_a_failover_reports_exactly_what_the_new_primary_knows() -> None:
    cluster, old, p1, p2 = make(credits=64)
    # `running` runs on both runners.
    running, _ = start_everywhere(cluster)
    cluster.deliver(INITIATOR, P1)
    cluster.deliver(INITIATOR, P2)
    p1.running(running)
    p2.running(running)
    # `forgotten` runs on P1 only; P1 ends its results, the initiator records the job done
    # and forgets it, while P1 has not yet marked it finished.
    forgotten, sends = old.start("wordcount", {}, [P1])
    cluster.apply(INITIATOR, sends)
    cluster.deliver(INITIATOR, P1)
    p1.running(forgotten)
    cluster.send(P1, INITIATOR, Batch(forgotten, RESULT_EDGE, 0, b"", last=True))
    assert cluster.deliver(P1, INITIATOR)[-1] == JobDone(forgotten)
    old.forget(forgotten)
    # `cancelled` runs on both; P2 sends P1 a batch that is still in flight when the
    # initiator cancels the job.
    cancelled, _ = start_everywhere(cluster)
    cluster.deliver(INITIATOR, P1)
    cluster.deliver(INITIATOR, P2)
    p1.running(cancelled)
    p2.running(cancelled)
    # `early`'s start reaches P2 only; P2's first batch reaches P1 before it.
    early, _ = start_everywhere(cluster)
    cluster.deliver(INITIATOR, P2)
    p2.running(early)
    first = Batch(early, 1, 0, b"early")
    cluster.send(P2, P1, first)
    assert cluster.deliver(P2, P1) == [Retained(P2, first)]
    in_flight = Batch(cancelled, 1, 0, b"stale")
    cluster.send(P2, P1, in_flight)
    cluster.apply(INITIATOR, old.cancel(cancelled, 2, "superseded"))
    cluster.deliver(INITIATOR, P2)
    # The old primary crashes before `early`'s start and `cancelled`'s cancel reach P1.
    cluster.lose(INITIATOR, P1)
    # The new primary recovers the old one's state from the log, and nothing else.
    new = InitiatorJobs(INITIATOR, next_local_id=old.next_local_id, records=old.records())
    cluster.fail_over(new)
    assert [new.state(j) for j in (running, forgotten, cancelled, early)] == [
        InitiatorState.RUNNING,
        InitiatorState.UNKNOWN,
        InitiatorState.CANCELLED,
        InitiatorState.RUNNING,
    ]

    # P1 holds every one of them: three started, one with a batch kept.
    check = p1.check(INITIATOR)
    assert check == Check([running, forgotten, cancelled, early])
    cluster.send(P1, INITIATOR, check)
    assert cluster.deliver(P1, INITIATOR, one_byte_at_a_time=True) == [
        HeldJobs(P1, active=(running, early), ended=(cancelled,), unknown=(forgotten,))
    ]
    assert cluster.sent[-1] == (
        INITIATOR, P1, CheckResponse([running, early], [cancelled, forgotten])
    )
    assert cluster.deliver(INITIATOR, P1) == [Released((cancelled, forgotten))]
    assert [p1.state(j) for j in (running, forgotten, cancelled, early)] == [
        JobState.RUNNING,
        JobState.CANCELLED,
        JobState.CANCELLED,
        JobState.UNKNOWN,  # still waiting for its start, its batch kept
    ]
    assert p1.held() == (running,)
    assert p1.retained_jobs() == (early,)
    # The batch that was in flight arrives after the release: discarded, not retained.
    assert cluster.deliver(P2, P1) == [Discarded(P2, in_flight)]
    assert p1.retained_jobs() == (early,)
    # P2 holds `running` and `early` (it heard of the cancel): nothing to release.
    cluster.send(P2, INITIATOR, p2.check(INITIATOR))
    assert cluster.deliver(P2, INITIATOR) == [
        HeldJobs(P2, active=(running, early), ended=(), unknown=())
    ]
    assert cluster.deliver(INITIATOR, P2) == []
    # The recovered counter goes on past every id the old primary handed out.
    assert new.start("wordcount", {}, [P1])[0] == JobId(INITIATOR, 4)
