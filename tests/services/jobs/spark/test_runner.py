"""A real runner process, a real Connect server, the initiator's link over TCP."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from ambrosia_services.jobs import (
    Batch,
    Cancel,
    Check,
    Deliver,
    FlowControl,
    InitiatorJobs,
    JobCancelled,
    JobConnection,
    JobDone,
    JobId,
    JobMessage,
    Role,
    Start,
)
from ambrosia_services.jobs.attempts import (
    ATTEMPT_FILE,
    Attempt,
    Reconciled,
    RunnerCancelCode,
    plan_params,
    reconcile,
)
from ambrosia_services.jobs.link import Connected, Held, JobLinks, LinkEvent, RunnerAddress
from ambrosia_services.jobs.transport import Hello, exchange_hello

from tests.launcher import wait_until

from .conftest import committed_counts, counts_of

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(240)]

COORDINATOR = uuid.UUID("c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c0c0")


async def until(links: JobLinks, kinds: tuple[type, ...], seen: list[LinkEvent],
                limit: float = 90.0) -> LinkEvent:
    """Events until one of ``kinds``; every event is appended to ``seen``."""
    async with asyncio.timeout(limit):
        while True:
            event = await links.next_event()
            seen.append(event)
            if isinstance(event, kinds):
                return event


def result_rows(seen: list[LinkEvent], job: object) -> bytes:
    batches = [e.batch for e in seen if isinstance(e, Deliver) and e.batch.job_id == job]
    assert [b.number for b in batches] == list(range(len(batches)))
    assert [b.last for b in batches] == [False] * (len(batches) - 1) + [True]
    return b"".join(b.rows for b in batches)


def test_wordcount_through_a_runner_is_exact_and_streams_in_credited_batches(
        runners, words, tmp_path: Path) -> None:
    # Small batches and credit so the result must wait for grants: 4 KiB credit, 1 KiB
    # batches, offered by the initiator alone; the runner offers its defaults (1 MiB,
    # 64 KiB), so a runner that ignored the hellos' agreement would send a batch past the
    # credit and the link would break with CreditExceededError.
    runner = runners()
    text, expected = words
    attempt = Attempt("wc", 1)

    async def scenario() -> list[LinkEvent]:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)],
                         initial_credits=4096, batch_bytes=1024)
        seen: list[LinkEvent] = []
        async with links:
            await until(links, (Held,), seen)
            job = links.start("wordcount", plan_params(attempt, {"input": str(text)}),
                              [runner.member])
            await until(links, (JobDone, JobCancelled), seen)
            assert isinstance(seen[-1], JobDone) and seen[-1].job_id == job
        return seen

    seen = asyncio.run(scenario())
    assert isinstance(seen[0], Connected)
    assert seen[1] == Held(runner.member, (), ())
    rows = result_rows(seen, seen[-1].job_id)  # type: ignore[union-attr]
    batches = [e for e in seen if isinstance(e, Deliver)]
    assert len(batches) > 1 and all(len(b.batch.rows) <= 1024 for b in batches)
    assert counts_of(rows) == expected
    out = tmp_path / "out"
    assert committed_counts(attempt.final(out)) == expected
    assert (attempt.final(out) / ATTEMPT_FILE).read_text() == "1"
    assert not attempt.staging(out).exists()
    assert reconcile(attempt, out) is Reconciled.COMMITTED


def test_unknown_job_name_is_refused_with_a_cancel_request(runners) -> None:
    runner = runners()

    async def scenario() -> JobCancelled:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        seen: list[LinkEvent] = []
        async with links:
            links.start("nope", plan_params(Attempt("x", 1)), [runner.member])
            event = await until(links, (JobCancelled, JobDone), seen)
        assert isinstance(event, JobCancelled)
        return event

    cancel = asyncio.run(scenario()).cancel
    assert cancel.cancelled_by == runner.member
    assert cancel.error_code == RunnerCancelCode.BAD_PLAN
    assert "no job named 'nope'" in cancel.message


def test_two_attempts_racing_to_commit_leave_one_output_and_both_stream_it(
        runners, words, tmp_path: Path) -> None:
    runner = runners()
    text, expected = words
    first, second = Attempt("race", 1), Attempt("race", 2)

    async def scenario() -> list[LinkEvent]:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        seen: list[LinkEvent] = []
        async with links:
            for attempt in (first, second):
                links.start("wordcount", plan_params(attempt, {"input": str(text)}),
                            [runner.member])
            await until(links, (JobDone, JobCancelled), seen)
            await until(links, (JobDone, JobCancelled), seen)
        return seen

    seen = asyncio.run(scenario())
    done = [e.job_id for e in seen if isinstance(e, JobDone)]
    assert len(done) == 2
    assert counts_of(result_rows(seen, done[0])) == expected
    assert result_rows(seen, done[0]) == result_rows(seen, done[1])
    out = tmp_path / "out"
    winner = int((first.final(out) / ATTEMPT_FILE).read_text())
    loser = second if winner == 1 else first
    assert committed_counts(first.final(out)) == expected
    log = runner.log_text()
    assert log.count("this attempt's output is now the job's output") == 1
    assert log.count("another attempt's output was committed first") == 1
    assert reconcile(loser, out) is Reconciled.COMMITTED


def test_cancel_interrupts_the_running_attempt_and_commits_nothing(
        runners, tmp_path: Path) -> None:
    runner = runners()
    attempt = Attempt("cancelled", 1)

    async def scenario() -> JobCancelled:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        seen: list[LinkEvent] = []
        async with links:
            job = links.start("sleepy", plan_params(attempt, {"rows": 60, "sleep_ms": 1000}),
                              [runner.member])
            # Wait for a task to be writing (an interrupt while the server still plans the
            # write can be lost; the runner then commits nothing, but Spark works on).
            tasks = attempt.staging(tmp_path / "out") / "_temporary" / "0" / "_temporary"
            await asyncio.to_thread(wait_until, lambda: tasks.is_dir() and any(
                tasks.iterdir()), "a task of the attempt to write", 60)
            links.cancel(job, 7, "the user asked")
            event = await until(links, (JobCancelled, JobDone), seen)
        assert isinstance(event, JobCancelled)
        return event

    cancel = asyncio.run(scenario()).cancel
    assert (cancel.cancelled_by, cancel.error_code, cancel.message) == (
        COORDINATOR, 7, "the user asked")
    interrupted = f"interruptTag {attempt.tag} -> ['{attempt.operation_id}']"
    wait_until(lambda: interrupted in runner.log_text(), "the runner's interruptTag", 30)
    wait_until(lambda: "stopped after its cancel (nothing committed)" in runner.log_text(),
               "the attempt to stop", 60)
    out = tmp_path / "out"
    assert not attempt.final(out).exists()
    assert reconcile(attempt, out) is Reconciled.UNKNOWN


def test_a_batch_before_start_is_retained_and_one_after_cancel_discarded_over_tcp(
        runners) -> None:
    runner = runners()
    first, second = JobId(COORDINATOR, 1), JobId(COORDINATOR, 2)

    async def scenario() -> list[JobMessage]:
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.port)
        assert (await exchange_hello(reader, writer, Hello(COORDINATOR))).peer == runner.member
        conn = JobConnection(Role.INITIATOR, Role.PARTICIPANT)
        # No job takes input yet, so both jobs name no known job: the runner refuses them
        # (a cancel request), yet the early batch is delivered first and so credited.
        plan = plan_params(Attempt("tcp", 1))
        writer.write(conn.send(Batch(first, 1, 0, b"early")))
        writer.write(conn.send(Start(first, "nope", plan, [runner.member])))
        writer.write(conn.send(Cancel(first, COORDINATOR, 0, "stop")))
        writer.write(conn.send(Batch(first, 1, 1, b"late")))
        writer.write(conn.send(Start(second, "nope", plan, [runner.member])))
        received: list[JobMessage] = []
        async with asyncio.timeout(30):
            while len(received) < 4:
                conn.receive_data(await reader.read(65536))
                received.extend(conn.events())
        writer.close()
        return received

    received = asyncio.run(scenario())
    check, refused_first, grant, refused_second = received
    assert check == Check(())
    assert isinstance(refused_first, Cancel) and refused_first.job_id == first
    assert refused_first.error_code == RunnerCancelCode.BAD_PLAN
    assert grant == FlowControl(first, 1, len(b"early"))
    assert isinstance(refused_second, Cancel) and refused_second.job_id == second
    assert "discarded batch 1 of ended job" in runner.log_text()


@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_a_staged_batch_is_read_by_spark_exactly_and_a_damaged_block_fails_in_one_line(
        runners, words, tmp_path: Path, reader: str) -> None:
    """The records of a job marked ``records=True`` come from staged segments (several
    segments, several partitions), by either reader; a block whose bytes changed, or a
    segment that is gone, fails the attempt with the executor's one line naming it,
    nothing committed."""
    from ambrosia_services.staging import Ref

    from .conftest import stage_lines

    runner = runners()
    text, expected = words
    root = tmp_path / "staging"
    refs = stage_lines(root, text)
    assert len({r[5] for r in refs}) > 3  # several segments
    # Attempts (and so their Connect sessions) of their own per reader.
    good, damaged, missing = (Attempt(f"st-{reader}", 1), Attempt(f"st-bad-{reader}", 1),
                              Attempt(f"st-gone-{reader}", 1))
    victim = Ref.from_list(refs[7])
    gone = Ref.from_list(refs[-1])

    async def scenario() -> list[LinkEvent]:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        seen: list[LinkEvent] = []
        async with links:
            await until(links, (Held,), seen)
            args = {"staging": str(root), "refs": refs, "reader": reader}
            links.start("staged_words", plan_params(good, args), [runner.member])
            assert isinstance(await until(links, (JobDone, JobCancelled), seen), JobDone)
            with open(root / victim.segment, "r+b") as f:  # one byte of one line
                f.seek(victim.offset + victim.length - 20)
                byte = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([byte[0] ^ 1]))
            links.start("staged_words", plan_params(damaged, args), [runner.member])
            await until(links, (JobDone, JobCancelled), seen)
            (root / gone.segment).unlink()
            links.start("staged_words", plan_params(missing, {**args, "refs": refs[-1:]}),
                        [runner.member])
            await until(links, (JobDone, JobCancelled), seen)
        return seen

    seen = asyncio.run(scenario())
    out = tmp_path / "out"
    assert committed_counts(good.final(out)) == expected
    assert counts_of(result_rows(seen, next(e.job_id for e in seen
                                             if isinstance(e, JobDone)))) == expected
    cancels = [e.cancel for e in seen if isinstance(e, JobCancelled)]
    assert [c.error_code for c in cancels] == [int(RunnerCancelCode.JOB_FAILED)] * 2
    assert cancels[0].message == (
        f"StagedInputError: attempt {damaged}: SegmentDamagedError: staged segment "
        f"{root / victim.segment}, block at {victim.offset}: damaged (its check bytes "
        "differ); nothing of it is committed")
    assert cancels[1].message.startswith(
        f"StagedInputError: attempt {missing}: SegmentMissingError: staged segment "
        f"{root / gone.segment} is missing")
    for attempt in (damaged, missing):
        assert not attempt.final(out).exists()
