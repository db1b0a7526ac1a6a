"""The word count pipeline end to end, with real processes: the real feed tails two files
into ``ambrosia run wordcount``, two real runners count each
micro-batch on the shared Connect server, the real 2PC file sink commits the output.
While it runs, in turn, the coordinator's binding, its coordinator process, a runner and
the Connect server are killed with ``kill -9``; the committed output must still hold
every batch once, in order, with counts equal to a plain-Python recount."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import registry
from ambrosia_services.jobs.spark import ConnectServer
from ambrosia_services.pipeline import WordCountPipeline, count_words
from ambrosia_services.staging import segment_names

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, repro, upgrade_test
from samples.pipeline.next_version import WordCountPipelineV1
from tests.launcher import ROOT, Launcher, launcher, wait_until  # noqa: F401 - the fixture

from .conftest import free_port
from .pipeline_app import WordCountPipelineV2

FEED = "ambrosia_services.connectors.clients.feed"

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(400),
              pytest.mark.integration, pytest.mark.slow]

TARGET = "ambrosia_services.pipeline:WordCountPipeline"
NEXT = {1: "samples.pipeline.next_version:WordCountPipelineV1",
        2: "tests.services.jobs.spark.pipeline_app:WordCountPipelineV2"}
PIPELINE_JOBS = ("--jobs", "ambrosia_services.pipeline.jobs", "--workers", "2")
# How long a step of jobs may take before the run is taken as broken: generous, since a
# full suite on two cores once took longer than 90 s for four jobs after a kill.
LIMIT = 180
VOCABULARY = ["Alpha", "beta", "GAMMA", "delta's", "eps-ilon", "zeta", "Eta", "theta",
              "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho"]


def corpus(n: int, salt: int) -> list[str]:
    return [" ".join(VOCABULARY[(i * 7 + j * 3 + salt) % len(VOCABULARY)]
                     for j in range(i % 6 + 1)) + f" {i % 10}!" for i in range(n)]


def parse_output(data: bytes) -> tuple[list[int], int, Counter[str]]:
    """Batch numbers in output order, total lines, and the summed counts; each batch's
    header must agree with its rows, and rows must be sorted by word."""
    numbers: list[int] = []
    total_lines = 0
    counts: Counter[str] = Counter()
    text = data.decode()
    assert text.endswith("\n") or not text
    blocks = re.split(r"(?m)^(?=#batch\t)", text)
    for block in filter(None, blocks):
        header, *rows = block.splitlines()
        tag, k, lines, words = header.split("\t")
        assert tag == "#batch", header
        pairs = [row.split("\t") for row in rows]
        assert [w for w, _ in pairs] == sorted(w for w, _ in pairs)
        assert sum(int(c) for _, c in pairs) == int(words)
        numbers.append(int(k))
        total_lines += int(lines)
        counts.update({w: int(c) for w, c in pairs})
    return numbers, total_lines, counts


class Halves:
    """An ``ambrosia run`` process: the binding (the process itself) and its coordinator
    (its child), each killable on its own."""

    def __init__(self, launcher: Launcher, args: list[str]) -> None:  # noqa: F811
        self.launcher = launcher
        self.args = args
        self.target = TARGET
        self.p: ImmortalProcess = self.start()

    def start(self, wait: bool = True) -> ImmortalProcess:
        self.p = self.launcher.start(self.target, "wc", args=self.args, primary=False)
        if wait:
            self.p.wait_for("listening for sources")
        return self.p

    def coordinator_pid(self) -> int:
        pid = self.p.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def kill(self, half: str) -> None:
        victim = self.p.proc.pid if half == "binding" else self.coordinator_pid()
        os.kill(victim, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.p.proc.wait(20)  # the survivor notices and ends
        self.p.kill()  # nothing of this life may linger
        self.start()


class PipelineRun:
    """Two runners, the real 2PC file sink, the pipeline and a feed tailing two files that
    the test appends to; ``check`` compares the committed output with a recount."""

    def __init__(self, launcher: Launcher, runners: Any, tmp_path: Path) -> None:  # noqa: F811
        self.ports = dict(zip(("listen", "sink", "r1", "r2"), free_ports(4), strict=True))
        ports = self.ports
        out = tmp_path / "out"
        self.r1 = runners("r1", ports["r1"], out, PIPELINE_JOBS)
        self.r2 = runners("r2", ports["r2"], out, PIPELINE_JOBS)
        self.sink_dir = tmp_path / "sink"
        self.sink = subprocess.Popen(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.filesink", "--listen",
             f"127.0.0.1:{ports['sink']}", "--dir", str(self.sink_dir)],
            cwd=ROOT, stderr=open(tmp_path / "sink.log", "wb"))  # noqa: SIM115
        self.status = tmp_path / "status.json"
        self.cfg = tmp_path / "wc.toml"
        self.cfg.write_text(
            f'listen = "127.0.0.1:{ports["listen"]}"\ninterval_seconds = 0.2\n'
            f'status_seconds = 0.3\nstatus_file = "{self.status}"\n'
            f'runners = ["r1@127.0.0.1:{ports["r1"]}", "r2@127.0.0.1:{ports["r2"]}"]\n'
            f'out = "{out}"\nbatch_lines = 300\nbatch_seconds = 0.3\n'
            # Enough jobs at once that Spark is never "behind": a batch per append of
            # 300 lines, so the waits below can count jobs (adaptive batches are
            # tested with the handlers and run in the demo).
            f'jobs_in_flight = 16\n'
            f'[sinks]\nout = "127.0.0.1:{ports["sink"]}"\n')
        self.coordinator = Halves(launcher, ["--config", str(self.cfg)])
        self.inputs = [tmp_path / "a.txt", tmp_path / "b.txt"]
        for path in self.inputs:
            path.write_text("")
        self.feed = subprocess.Popen(
            [sys.executable, "-m", "tests.services.tuned", FEED, f"{FEED}.BACKOFF_CAP=0.5",
             "--", "--connect", f"127.0.0.1:{ports['listen']}", *map(str, self.inputs)],
            cwd=ROOT, stderr=open(tmp_path / "feed.log", "wb"))  # noqa: SIM115
        self.written: list[str] = []

    def report(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.status.read_text()))
        except (OSError, ValueError):
            return {}

    def jobs(self) -> dict[str, int]:
        return dict(self.report().get("jobs", {}))

    def append(self, n: int) -> None:
        for i, path in enumerate(self.inputs):
            lines = corpus(n, len(self.written) + i)
            with open(path, "a") as f:
                f.write("".join(f"{line}\n" for line in lines))
            self.written.extend(lines)

    def done_at_least(self, n: int) -> bool:
        return self.jobs().get("done", 0) >= n

    def running(self) -> None:
        wait_until(lambda: self.jobs().get("running", 0) > 0, "jobs running", 30)

    def check(self) -> list[int]:
        """Waits for every line written to be committed; then every batch must be there
        once, in order, with counts equal to a recount. Returns the batch numbers."""
        committed = self.sink_dir / "committed"

        def settled() -> bool:
            # A commit copies its range in chunks: a read during a copy may end inside
            # a line, and is looked at again later.
            data = committed.read_bytes() if committed.exists() else b""
            return data.endswith(b"\n") and parse_output(data)[1] == len(self.written)

        wait_until(settled, "every line committed", 180)
        numbers, total, counts = parse_output(committed.read_bytes())
        assert numbers == list(range(1, len(numbers) + 1))
        assert total == len(self.written)
        assert counts == count_words(self.written)
        wait_until(lambda: self.jobs().get("done") == len(numbers), "the status file")
        final = self.jobs()
        assert final["failed"] == 0 and final["running"] == 0
        return numbers

    def close(self) -> None:
        self.feed.kill()
        self.sink.kill()
        self.feed.wait()
        self.sink.wait()


def test_word_counts_are_exact_through_kills_of_every_part(
        launcher: Launcher, runners, connect_server: ConnectServer,  # noqa: F811
        tmp_path: Path) -> None:
    run = PipelineRun(launcher, runners, tmp_path)
    coordinator = run.coordinator
    try:
        run.append(300)
        wait_until(lambda: run.done_at_least(1), "a first job done", LIMIT)
        # 1. the coordinator's binding, while jobs run.
        run.append(300)
        run.running()
        coordinator.kill("binding")
        run.append(300)
        wait_until(lambda: run.done_at_least(5), "jobs done after the binding's death", LIMIT)
        # 2. its coordinator process.
        run.append(300)
        run.running()
        coordinator.kill("coordinator")
        run.append(300)
        wait_until(lambda: run.done_at_least(9), "jobs done after the coordinator's death", LIMIT)
        # 3. a runner, then 4. the Connect server, each mid-job.
        run.append(300)
        run.running()
        run.r1.kill()
        run.r1.start()
        run.append(300)
        run.running()
        pid = connect_server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        connect_server.wait_restarted(pid, 120)
        run.append(300)
        numbers = run.check()
        # Committed everywhere: every staged block released, every segment but the one
        # being written deleted.
        wait_until(lambda: run.report()["staged"]["backlog_bytes"] == 0, "no backlog", 30)
        staging = tmp_path / "out" / "staging"
        wait_until(lambda: len(segment_names(staging, "wc.")) <= 1, "segments deleted", 30)
        links = json.loads(run.status.read_text())["job_links"]
        assert links["runners"] == {f"r{i}@127.0.0.1:{run.ports[f'r{i}']}": True
                                    for i in (1, 2)}
        # Whether a kill cost an attempt depends on when it landed (the status file that
        # times the kills lags under load), so attempts are not asserted here; the
        # exact output above is what the kills must not change.
        coordinator.p.stop()
    finally:
        run.close()
    assert run.r2.process is not None and run.r2.process.poll() is None
    # A replay of the kept history reads no segment: the results are in the log.
    shutil.rmtree(staging)
    replay = repro("wc", WordCountPipeline, home=launcher.home)
    assert replay.status == "ok"
    assert replay.state.emitted == len(numbers) and not replay.state.uncommitted


# `make chaos`: a live upgrade while a feed streams stays in make test in the connector
# coordinator's test_lifecycle, the pipeline's state carried whole with jobs and batches in
# flight in tests/immortal/test_upgrade_rule, and a crash between any two steps of a live
# upgrade in the simulation (tests/sim/upgrade).
@pytest.mark.chaos
def test_live_upgrades_mid_run_and_a_kill_during_one_lose_no_batch(
        launcher: Launcher, runners, connect_server: ConnectServer,  # noqa: F811
        tmp_path: Path) -> None:
    """Version 0 -> 1 with batches, jobs and sink transactions in flight, then 1 -> 2
    killed with kill -9 at a random moment of the switch and started again. A conversion
    that dropped the job table or the batches would lose lines (their positions are kept,
    so the feed never sends them again) and number batches from 1 again."""
    run = PipelineRun(launcher, runners, tmp_path)
    coordinator = run.coordinator
    rng = random.Random(os.environ.get("PYTEST_XDIST_WORKER", "") + str(os.getpid()))
    try:
        run.append(300)
        wait_until(lambda: run.done_at_least(1), "a first job done", LIMIT)
        run.append(600)
        run.running()
        before = run.report()["batches"]
        assert before["cut"] > before["emitted"]  # batches in flight at the switch
        coordinator.p.stop()
        coordinator.args = ["--config", str(run.cfg), "--upgrade-to", NEXT[1]]
        coordinator.start()
        coordinator.p.wait_for("upgraded to WordCountPipelineV1 version 1 (live)")
        took = coordinator.p.wait_for("version 1 took over")
        carried = re.search(r"took over: (\d+) batches cut", took)
        assert carried is not None and int(carried[1]) >= before["cut"], took
        run.append(300)
        wait_until(lambda: run.report().get("code_version") == 1, "version 1's status", 30)
        wait_until(lambda: run.done_at_least(before["cut"] + 1), "jobs done after it", LIMIT)
        # Version 1 -> 2, killed during the switch.
        run.append(300)
        run.running()
        coordinator.p.stop()
        coordinator.target = NEXT[1]
        coordinator.args = ["--config", str(run.cfg), "--upgrade-to", NEXT[2]]
        coordinator.start(wait=False)
        coordinator.p.wait_for("registered the upgrade of wc from version 1 to version 2")
        time.sleep(rng.uniform(0.0, 2.0))
        coordinator.p.kill()
        coordinator.start()
        run.append(300)
        wait_until(lambda: run.report().get("code_version") == 2, "version 2's status", 60)
        numbers = run.check()
        assert registry.load("wc", launcher.home).current_version == 2
    finally:
        run.close()
    coordinator.p.stop()
    # The upgrade test of the whole history ends where the live run did.
    replayed = upgrade_test("wc", WordCountPipelineV1, WordCountPipelineV2, home=launcher.home)
    assert replayed.state.emitted == len(numbers)
    assert isinstance(replayed.state, WordCountPipelineV2)


def test_cancel_goes_through_the_coordinator_and_a_failing_job_fails_after_its_attempts(
        launcher: Launcher, runners, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    out = tmp_path / "out"
    runner = runners("r1", port, out)  # the test jobs: sleepy, wordcount of a file
    status = tmp_path / "status.json"
    cfg = tmp_path / "app.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\nstatus_seconds = 0.3\nstatus_file = "{status}"\n'
                   f'runners = ["r1@127.0.0.1:{port}"]\nout = "{out}"\nmax_attempts = 2\n')
    p = launcher.start("tests.services.jobs.spark.pipeline_app:JobsApp", "app",
                       args=["--config", str(cfg)])

    def report() -> dict[str, Any]:
        try:
            return dict(json.loads(status.read_text()))
        except (OSError, ValueError):
            return {}

    def settled() -> bool:
        jobs = report().get("jobs", {})
        return jobs.get("cancelled") == 1 and jobs.get("failed") == 1

    wait_until(settled, "the cancel and the failure", 120)
    app = report()["app"]
    sleepy, failing = app["keys"]
    assert (sleepy, failing) == ("app-1", "app-2")
    [(hook, key, reason)] = app["heard"]  # no result of the cancelled job, one failure
    assert (hook, key) == ("failed", failing)
    assert "PATH_NOT_FOUND" in reason, reason
    jobs = report()["jobs"]
    assert jobs["attempts"] == 3 and jobs["running"] == 0  # 1 + 2 attempts
    wait_until(lambda: "interruptTag ambrosia-job-app-1-1" in runner.log_text(),
               "the runner's interruptTag", 30)
    assert not (out / sleepy).exists()  # nothing of the cancelled job was committed
    assert [line for line in runner.log_text().splitlines()
            if "running wordcount attempt app-2#" in line] != []
    p.stop()
