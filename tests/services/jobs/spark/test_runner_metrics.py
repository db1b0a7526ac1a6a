"""A real runner's metrics, scraped while it runs a job on a real Connect server: the
job started, its run ended committed, and its duration was measured; a refused start
(an unknown job) is not a job run."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from ambrosia_services.jobs import InitiatorJobs, JobCancelled, JobDone
from ambrosia_services.jobs.attempts import Attempt, plan_params
from ambrosia_services.jobs.link import Held, JobLinks, RunnerAddress

from ambrosia_core.ports import free_ports
from tests.core.scraping import scrape, value

from .test_runner import until

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(240)]

COORDINATOR = uuid.UUID("c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c0c1")


def test_a_runner_exports_its_jobs_runs_and_their_durations(runners, words,
                                                            tmp_path: Path) -> None:
    (port,) = free_ports(1)
    runner = runners(extra=("--metrics", str(port)))
    text, _ = words
    before = scrape(port)
    assert value(before, "ambrosia_runner_jobs_started_total", member="r1") == 0

    async def scenario() -> None:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
        seen: list[object] = []
        async with links:
            await until(links, (Held,), seen)
            links.start("nope", plan_params(Attempt("x-metrics", 1)), [runner.member])
            await until(links, (JobCancelled,), seen)
            links.start("wordcount", plan_params(Attempt("wc-metrics", 1), {"input": str(text)}),
                        [runner.member])
            await until(links, (JobDone,), seen)

    asyncio.run(scenario())
    got = scrape(port)
    assert value(got, "ambrosia_runner_jobs_started_total", member="r1") == 1
    assert value(got, "ambrosia_runner_jobs_ended_total", member="r1",
                 outcome="committed") == 1
    assert value(got, "ambrosia_runner_jobs_ended_total", member="r1", outcome="failed") == 0
    assert value(got, "ambrosia_runner_job_duration_seconds_count", member="r1",
                 outcome="committed") == 1
    assert value(got, "ambrosia_runner_job_duration_seconds_sum", member="r1",
                 outcome="committed") > 0
    assert value(got, "ambrosia_runner_jobs_running", member="r1") == 0
