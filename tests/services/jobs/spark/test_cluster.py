"""The cluster path: a standalone master and worker, a Connect server on them, the same
word count through a runner (what users who outgrow one machine point the runner at), from
a text file and from staged segments that the cluster's executor reads. The Connect
server listens on the address it is given, not on 127.0.0.1 (the recipe gives runners
elsewhere that address; the server once pinned its gRPC binding and driver to 127.0.0.1)."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import pytest
from ambrosia_services.jobs import Deliver, InitiatorJobs, JobCancelled, JobDone
from ambrosia_services.jobs.attempts import Attempt, plan_params
from ambrosia_services.jobs.link import JobLinks, LinkEvent, RunnerAddress
from ambrosia_services.jobs.spark import ConnectServer, StandaloneCluster
from ambrosia_services.jobs.spark.server import port_open

from ambrosia_core.ports import free_ports
from tests.conftest import JVM_OPTIONS

from .conftest import RunnerProcess, committed_counts, counts_of, stage_lines

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(300)]

COORDINATOR = uuid.UUID("c2c2c2c2-c2c2-c2c2-c2c2-c2c2c2c2c2c2")


@pytest.mark.slow
def test_a_standalone_cluster_runs_the_word_count_exactly(
        tmp_path: Path, words: tuple[Path, dict[str, int]]) -> None:
    text, expected = words
    attempt = Attempt("cluster-wc", 1)
    staged = Attempt("cluster-staged", 1)
    root = tmp_path / "staging"
    refs = stage_lines(root, text)
    out = tmp_path / "out"
    cluster_port, connect_port = free_ports(2)
    cluster = StandaloneCluster(cluster_port, cores=1, memory="1g", log_dir=tmp_path / "cluster")
    with cluster:
        confs = {"spark.cores.max": "1", "spark.executor.memory": "512m",
                 "spark.executor.extraJavaOptions": JVM_OPTIONS}
        with ConnectServer(connect_port, host="127.0.0.2", master=cluster.url,
                           log_dir=tmp_path / "connect", confs=confs) as server:
            assert server.url == f"sc://127.0.0.2:{connect_port}"
            assert port_open("127.0.0.2", connect_port)
            assert not port_open("127.0.0.1", connect_port)
            runner = RunnerProcess("cluster-runner", server.url, out, tmp_path / "runner.log")
            runner.start()
            try:
                async def scenario() -> list[list[LinkEvent]]:
                    links = JobLinks(InitiatorJobs(COORDINATOR),
                                     [RunnerAddress(runner.member, "127.0.0.1", runner.port)])
                    jobs = [("wordcount", attempt, {"input": str(text)}),
                            ("staged_words", staged, {"staging": str(root), "refs": refs})]
                    seen: list[list[LinkEvent]] = []
                    async with links, asyncio.timeout(240):
                        for name, which, args in jobs:
                            seen.append([])
                            links.start(name, plan_params(which, args), [runner.member])
                            while not isinstance(event := await links.next_event(),
                                                 (JobDone, JobCancelled)):
                                seen[-1].append(event)
                            seen[-1].append(event)
                    return seen

                seen, seen_staged = asyncio.run(scenario())
            finally:
                runner.kill()
    assert isinstance(seen[-1], JobDone), seen[-1]
    rows = b"".join(e.batch.rows for e in seen if isinstance(e, Deliver))
    assert counts_of(rows) == expected
    assert committed_counts(attempt.final(out)) == expected
    assert isinstance(seen_staged[-1], JobDone), seen_staged[-1]
    staged_rows = b"".join(e.batch.rows for e in seen_staged if isinstance(e, Deliver))
    assert counts_of(staged_rows) == expected
    assert committed_counts(staged.final(out)) == expected
    # The segments were read on the cluster's executor, by the JVM source its driver
    # shipped to it (no Python worker: neither job runs Python there).
    executor_logs = "".join(p.read_text(errors="replace")
                            for p in (tmp_path / "cluster" / "work").rglob("stderr"))
    assert "ambrosia-staged-" in executor_logs  # the jar, fetched from the driver
    read = re.findall(r"BlockReader: read (\d+) staged blocks \((\d+) records", executor_logs)
    assert sum(int(blocks) for blocks, _ in read) == len(refs)
    assert sum(int(records) for _, records in read) == len(text.read_bytes().splitlines())
    assert "Starting Python task execution" not in executor_logs
    # The job ran on the cluster's executor, not in a local driver.
    assert "Registering app" in (tmp_path / "cluster" / "master.log").read_text()
