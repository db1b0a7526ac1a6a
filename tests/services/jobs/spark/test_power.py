"""A power cut of the runner's machine after a job committed: the committed output must
be whole afterwards. Spark writes the output files without syncing them, so the commit
itself must make them durable before its rename, and the rename durable after it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_services.jobs import InitiatorJobs, JobCancelled, JobDone
from ambrosia_services.jobs.attempts import (
    ATTEMPT_FILE,
    Attempt,
    Reconciled,
    plan_params,
    reconcile,
)
from ambrosia_services.jobs.link import Held, JobLinks, LinkEvent, RunnerAddress

from tests.power.disk import PowerDisk, mounted

from .conftest import committed_counts
from .test_runner import COORDINATOR, until

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(240)]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerDisk]:
    with mounted(tmp_path / "power") as d:
        yield d


def test_a_committed_output_survives_a_power_cut(runners, words, disk: PowerDisk) -> None:
    out = disk.mount / "out"
    runner = runners(out=out)
    text, expected = words
    attempt = Attempt("wc-power", 1)

    async def scenario() -> list[LinkEvent]:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        seen: list[LinkEvent] = []
        async with links:
            await until(links, (Held,), seen)
            links.start("wordcount", plan_params(attempt, {"input": str(text)}),
                        [runner.member])
            await until(links, (JobDone, JobCancelled), seen)
        return seen

    seen = asyncio.run(scenario())
    assert isinstance(seen[-1], JobDone), seen[-1]
    assert reconcile(attempt, out) is Reconciled.COMMITTED
    runner.kill()  # the machine goes down: the runner with it
    report = disk.restart()
    assert report, "the cut dropped nothing: Spark's writes were all synced?"
    # What the job's output holds after the machine is back: all of it, once.
    assert reconcile(attempt, out) is Reconciled.COMMITTED, "\n".join(report)
    assert (attempt.final(out) / ATTEMPT_FILE).read_text() == "1"
    assert committed_counts(attempt.final(out)) == expected, "\n".join(report)
