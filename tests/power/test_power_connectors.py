"""Power cuts under the connector pipeline: the machine that runs the connector coordinator
(its coordinator and binding, their registry and logs, its staged segments) and the 2PC
file sink (its committed file, pending file and transaction log) loses power at random
moments while feeds on another machine keep appending lines. Everything not fsynced on
that machine is dropped; the feeds reconnect and resend from what was acknowledged. At
the end the sink's committed file holds every line exactly once, in order per stream."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from functools import partial
from pathlib import Path

import pytest

from ambrosia_core.durable import make_dirs
from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import Launcher, NeverHappenedError, wait_until
from tests.services.connectors.clients.helpers import SinkProcess
from tests.services.connectors.test_crashes import (
    TAILED,
    Pipeline,
    _logged,
    by_stream,
    coordinator_pid,
    line,
)

from .disk import PowerDisk

# `make chaos`: power cuts stay in make test through tests/power/test_power_chaos.py.
pytestmark = [pytest.mark.integration, pytest.mark.chaos]

STEPS = 12
BURST = 200
CUTS = 3


class PoweredPipeline(Pipeline):
    """The coordinator and the sink on the disk that loses power; the feeds beside it."""

    def __init__(self, disk: PowerDisk, tmp: Path, *, staged: bool) -> None:
        self.disk = disk
        self.staged = staged
        make_dirs(disk.mount / "home")  # as a machine set up long before the cuts has it
        self.launcher, self.tmp = Launcher(disk.mount / "home"), tmp
        self.port, self.sink_port = free_ports(2)
        self.sink = self._sink()
        self.coord = self._coord()
        # Only the tailing feeds (an active one and a standby), which outlive every cut.
        self.args = {"tail feed": list(TAILED)}
        self.started = 0
        first = self._feed("tail feed")
        wait_until(partial(_logged, tmp / f"feed-{self.started}.log", b"connected to"),
                   "the new feed connected", 30)
        self.feeds = {"tail feed": [first, self._feed("tail feed")]}

    def _config(self) -> None:
        staging = f'staging = "{self.disk.mount / "staging"}"\n' if self.staged else ""
        segments = "segment_bytes = 8192\n" if self.staged else ""
        (self.tmp / "coord.toml").write_text(
            f'listen = "127.0.0.1:{self.port}"\ninterval_bytes = 4096\n'
            f'interval_seconds = 0.05\n{staging}'
            f'[tuning]\nbatch_messages = 64\ncredits = 1000000\n{segments}'
            f'[sinks]\nout = "127.0.0.1:{self.sink_port}"\n')

    def _sink(self) -> SinkProcess:
        return SinkProcess(self.disk.mount / "sink", self.tmp / "sink.log", port=self.sink_port)

    def _coord(self) -> ImmortalProcess:
        self._config()
        return super()._coord()

    def power_cut(self) -> list[str]:
        """Every process of the machine dies at once; its unsynced writes are dropped."""
        coordinator = coordinator_pid(self.coord)
        for pid in (self.coord.proc.pid, coordinator, self.sink.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.coord.kill()
        self.sink.kill()
        _wait_gone(coordinator)
        report = self.disk.restart()
        self.sink = self._sink()
        self.coord = self._coord()
        return report


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} outlived its kill -9")


@pytest.mark.slow
@pytest.mark.parametrize("staged", [False, True], ids=["in-log", "staged"])
def test_every_line_committed_once_through_power_cuts(disk: PowerDisk, tmp_path: Path,
                                                       staged: bool) -> None:
    seed = int(os.environ.get("POWER_CUT_SEED", "0")) or random.randrange(1, 2**32)
    print(f"POWER_CUT_SEED={seed}")  # pytest shows it when the test fails
    rng = random.Random(seed)
    for name in TAILED:
        (tmp_path / name).write_bytes(b"")
    cut_at = set(rng.sample(range(2, STEPS), CUTS))
    pipe = PoweredPipeline(disk, tmp_path, staged=staged)
    reports: list[list[str]] = []
    try:
        for step in range(STEPS):
            for name in TAILED:
                with (tmp_path / name).open("ab") as f:
                    f.write(b"".join(line(name[0], i)
                                     for i in range(step * BURST, (step + 1) * BURST)))
            time.sleep(rng.uniform(0.0, 0.05))
            if step in cut_at:
                reports.append(pipe.power_cut())
            time.sleep(rng.uniform(0.0, 0.1))
        want = {s: [line(s, i) for i in range(STEPS * BURST)] for s in ("a", "b")}
        committed = disk.mount / "sink" / "committed"

        def complete() -> bool:
            got = by_stream(committed.read_bytes()) if committed.exists() else {}
            assert all(v == want[k][:len(v)] for k, v in got.items()), (
                f"seed {seed}: committed lines per stream "
                f"{ {k: len(v) for k, v in got.items()} } are not a prefix of the lines "
                f"sent; duplicates { {k: len(v) - len(set(v)) for k, v in got.items()} }\n"
                + _dropped(reports))
            return got == want

        try:
            wait_until(complete, "every line committed once", 60)
        except NeverHappenedError:
            got = by_stream(committed.read_bytes()) if committed.exists() else {}
            raise AssertionError(
                f"seed {seed}: committed lines per stream "
                f"{ {k: len(v) for k, v in got.items()} }, wanted "
                f"{ {k: len(v) for k, v in want.items()} }\n{_dropped(reports)}\n"
                f"{pipe.logs()}\n--- the coordinator\n"
                + "\n".join(pipe.coord.lines[-40:])) from None
        assert len(reports) == CUTS and all(reports), reports  # each cut dropped something
        assert disk.complaints() == []
    finally:
        pipe.close()
        for p in pipe.launcher.procs:
            p.kill()


def _dropped(reports: list[list[str]]) -> str:
    return "\n".join(f"cut {i}: {line}" for i, report in enumerate(reports, 1)
                     for line in report)
