"""The cluster path: a standalone master and worker, a Connect server on them, the same
word count through a runner (what users who outgrow one machine point the runner at)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from ambrosia_py.ports import free_ports
from services.jobs import Deliver, InitiatorJobs, JobCancelled, JobDone
from services.jobs.attempts import Attempt, plan_params
from services.jobs.link import JobLinks, LinkEvent, RunnerAddress
from services.jobs.spark import ConnectServer, StandaloneCluster

from .conftest import RunnerProcess, committed_counts, counts_of

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(300)]

COORDINATOR = uuid.UUID("c2c2c2c2-c2c2-c2c2-c2c2-c2c2c2c2c2c2")


@pytest.mark.slow
def test_a_standalone_cluster_runs_the_word_count_exactly(
        tmp_path: Path, words: tuple[Path, dict[str, int]]) -> None:
    text, expected = words
    attempt = Attempt("cluster-wc", 1)
    out = tmp_path / "out"
    cluster_port, connect_port = free_ports(2)
    cluster = StandaloneCluster(cluster_port, cores=1, memory="1g", log_dir=tmp_path / "cluster")
    with cluster:
        confs = {"spark.cores.max": "1", "spark.executor.memory": "512m"}
        with ConnectServer(connect_port, master=cluster.url, log_dir=tmp_path / "connect",
                           confs=confs) as server:
            runner = RunnerProcess("cluster-runner", server.url, out, tmp_path / "runner.log")
            runner.start()
            try:
                async def scenario() -> list[LinkEvent]:
                    links = JobLinks(InitiatorJobs(COORDINATOR),
                                     [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
                    seen: list[LinkEvent] = []
                    async with links, asyncio.timeout(180):
                        links.start("wordcount", plan_params(attempt, {"input": str(text)}),
                                    [runner.member])
                        while not isinstance(event := await links.next_event(),
                                             (JobDone, JobCancelled)):
                            seen.append(event)
                        seen.append(event)
                    return seen

                seen = asyncio.run(scenario())
            finally:
                runner.kill()
    assert isinstance(seen[-1], JobDone), seen[-1]
    rows = b"".join(e.batch.rows for e in seen if isinstance(e, Deliver))
    assert counts_of(rows) == expected
    assert committed_counts(attempt.final(out)) == expected
    # The job ran on the cluster's executor, not in a local driver.
    assert "Registering app" in (tmp_path / "cluster" / "master.log").read_text()
