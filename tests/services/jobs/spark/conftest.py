"""Fixtures for the Spark tests: one local[2] Connect server for the tests of this package
(one JVM: every Spark test is in the xdist group "spark", so one worker runs them all, one
after the other; it stops when the last of them ends, not when the run does), runner
processes that are always killed in teardown, and a word count input with its answer."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ambrosia_services.jobs.attempts import member_id
from ambrosia_services.jobs.spark import ConnectServer

from ambrosia_core.ports import free_ports

ROOT = Path(__file__).resolve().parents[4]
JOBS_MODULE = "tests.services.jobs.spark.jobs_for_tests"


def free_port() -> int:
    """A free port on 127.0.0.1, below the ephemeral range (see ``ambrosia_core.ports``)."""
    return free_ports(1)[0]


@pytest.fixture(scope="package")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = ConnectServer(free_port(), master="local[2]",
                           log_dir=tmp_path_factory.mktemp("connect"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


class RunnerProcess:
    """``python -m ambrosia_services.jobs.runner`` as a child; ``kill()`` is ``kill -9``."""

    def __init__(self, name: str, connect: str, out: Path, log: Path, port: int = 0,
                 extra: tuple[str, ...] = ()) -> None:
        self.name = name
        self.member = member_id(name)
        self.connect = connect
        self.out = out
        self.log = log
        self.port = port
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RunnerProcess:
        env = {k: v for k, v in os.environ.items() if k != "MASTER"}
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ambrosia_services.jobs.runner",
                 "--listen", f"127.0.0.1:{self.port}", "--connect", self.connect,
                 "--jobs", JOBS_MODULE, "--instance-name", self.name, "--dir", str(self.out),
                 *self.extra],
                stdout=subprocess.PIPE, stderr=log, cwd=ROOT, env=env,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        found = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert found, f"runner did not start: {line!r} (log {self.log.read_text()[-2000:]})"
        self.port = int(found.group(1))
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text()


@pytest.fixture
def runners(tmp_path: Path, connect_server: ConnectServer) -> Iterator[
        Callable[..., RunnerProcess]]:
    made: list[RunnerProcess] = []

    def make(name: str = "r1", port: int = 0, out: Path | None = None,
             extra: tuple[str, ...] = ()) -> RunnerProcess:
        runner = RunnerProcess(name, connect_server.url, out or tmp_path / "out",
                               tmp_path / f"{name}-{len(made)}.log", port, extra)
        made.append(runner)
        return runner.start()

    yield make
    for runner in made:
        runner.kill()


@pytest.fixture
def words(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A text file of 2,000 lines over 600 words, and its exact word counts (the result,
    about 18 KB of JSON lines, needs several batches and credit grants)."""
    vocabulary = [f"word{i:04d}" for i in range(600)]
    lines = [" ".join(vocabulary[(i * 7 + j * 31) % len(vocabulary)] for j in range(i % 9 + 1))
             for i in range(2000)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n")
    return path, dict(collections.Counter(w for line in lines for w in line.split()))


def counts_of(rows: bytes) -> dict[str, int]:
    """Word counts from JSON lines (every line whole)."""
    result: dict[str, int] = {}
    for line in rows.splitlines():
        record = json.loads(line)
        assert record["word"] not in result
        result[record["word"]] = record["count"]
    return result


def committed_counts(final: Path) -> dict[str, int]:
    rows = b"".join(p.read_bytes() for p in sorted(final.glob("part-*")))
    return counts_of(rows)


def stage_lines(root: Path, text: Path, lines_per_block: int = 97,
                segment_bytes: int = 8192) -> list[list[Any]]:
    """Stage ``text``'s lines as the source listener does (blocks of a run of lines,
    segments rolled at ``segment_bytes``); the references, as a job's ``refs``."""
    from ambrosia_services.staging import SegmentWriter

    lines = text.read_bytes().splitlines(keepends=True)
    writer = SegmentWriter(root, "t", segment_bytes=segment_bytes)
    refs = []
    for first in range(0, len(lines), lines_per_block):
        run = lines[first:first + lines_per_block]
        refs.append(writer.append(1, first, first + len(run) - 1, run).to_list())
    writer.sync()
    writer.close()
    return refs
