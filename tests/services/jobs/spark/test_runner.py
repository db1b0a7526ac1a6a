"""A real runner process, a real Connect server, the initiator's link over TCP."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from services.jobs import Deliver, InitiatorJobs, JobCancelled, JobDone
from services.jobs.attempts import (
    ATTEMPT_FILE,
    Attempt,
    Reconciled,
    RunnerCancelCode,
    plan_params,
    reconcile,
)
from services.jobs.link import Connected, Held, JobLinks, LinkEvent, RunnerAddress

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
    # Small batches and credit so the result must wait for grants: 4 KiB credit, 1 KiB batches.
    runner = runners(extra=("--credits", "4096", "--batch-bytes", "1024"))
    text, expected = words
    attempt = Attempt("wc", 1)

    async def scenario() -> list[LinkEvent]:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)],
                         initial_credits=4096)
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
