"""The whole pipeline through kill -9: real feed processes send files of numbered lines
through the coordinator (`ambrosia run`) to the real 2PC file sink, while the binding, the
coordinator process, the sink and the feeds are each killed at random points and
restarted. The sink's committed file must end up holding every line exactly once, in
order per stream. The kills' order and moments come from a seed, printed when the test
fails; ``CONNECTOR_CRASH_SEED=N`` repeats its choices (timing still varies)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import ROOT, Launcher, NeverHappenedError, wait_until

from .clients.helpers import SinkProcess
from .coordinator.peers import Source, lines

pytestmark = pytest.mark.integration

TARGET = "tests.services.connectors.tuned_app:TunedCoordinator"  # [tuning]: credits
TAILED = ("a.log", "b.log")  # followed while the test appends to them
ONCE = "c.log"  # sent whole, then EOS; the feed exits
STEPS = 30  # bursts of appended lines
BURST = 300  # lines per followed file per burst
ONCE_LINES = 20000
KILLS = ("binding", "coordinator", "sink", "tail feed", "sink", "tail feed", "binding",
         "coordinator", "sink", "tail feed", "sink", "tail feed")


def line(stream: str, i: int) -> bytes:
    return f"{stream} {i:06d} {'x' * (i % 23)}\n".encode()


class Pipeline:
    """The processes of one run, each restartable after a kill -9. Each kind of feed
    runs twice, as an active connector and a standby whose NOTIFYs are refused while the
    active one holds the streams; the standby takes over within a few milliseconds of
    the active one's death, while its last messages may still be on their way."""

    def __init__(self, launcher: Launcher, tmp: Path) -> None:
        self.launcher, self.tmp = launcher, tmp
        self.port, self.sink_port = free_ports(2)
        # Credits without limit: a standby's refused NOTIFYs each spend one that no ACK
        # returns, and the --once file should be in flight whole when its feed dies.
        (tmp / "coord.toml").write_text(
            f'listen = "127.0.0.1:{self.port}"\ninterval_bytes = 4096\n'
            f'interval_seconds = 0.05\n[tuning]\nbatch_messages = 64\ncredits = 1000000\n'
            f'[sinks]\nout = "127.0.0.1:{self.sink_port}"\n')
        self.sink = self._sink()
        self.coord = self._coord()
        self.args = {"tail feed": list(TAILED), "once feed": ["--once", ONCE]}
        self.started = 0
        self.feeds: dict[str, list[subprocess.Popen[bytes]]] = {}
        for kind in self.args:
            # The first holds the streams before the standby starts: the oldest feed of a
            # kind is always the active one.
            first = self._feed(kind)
            wait_until(partial(_logged, self.tmp / f"feed-{self.started}.log",
                               b"connected to"), "the new feed connected", 30)
            self.feeds[kind] = [first, self._feed(kind)]

    def _sink(self) -> SinkProcess:
        return SinkProcess(self.tmp / "sink", self.tmp / "sink.log", port=self.sink_port)

    def _coord(self) -> ImmortalProcess:
        p = self.launcher.start(TARGET, "coord", args=["--config", str(self.tmp / "coord.toml")])
        p.wait_for("listening for sources")
        return p

    def _feed(self, kind: str) -> subprocess.Popen[bytes]:
        self.started += 1
        with (self.tmp / f"feed-{self.started}.log").open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "tests.services.tuned", FEED, f"{FEED}.BACKOFF_CAP=0.02",
                 f"{FEED}.POLL_SECONDS=0.01", "--", "--connect", f"127.0.0.1:{self.port}",
                 "--instance-name", kind.replace(" ", "-"), *self.args[kind]],
                cwd=self.tmp, stdout=out, stderr=out, env=dict(os.environ, PYTHONPATH=_path()))

    def kill(self, what: str) -> None:
        """kill -9 of one part, then its restart."""
        if what == "binding":
            os.kill(self.coord.proc.pid, signal.SIGKILL)
            self.coord.kill()  # and the coordinator process, if it outlived its binding
            self.coord = self._coord()
        elif what == "coordinator":
            os.kill(coordinator_pid(self.coord), signal.SIGKILL)
            self.coord.proc.wait(20)  # the binding ends with its coordinator
            self.coord.kill()
            self.coord = self._coord()
        elif what == "sink":
            self.sink.kill()
            self.sink = self._sink()
        else:
            feeds = self.feeds[what]
            oldest = feeds[0]  # the active one, unless both finished
            if oldest.poll() is None:
                _kill(oldest)
                feeds.pop(0)
                feeds.append(self._feed(what))

    def once_done(self) -> bool:
        codes = [f.poll() for f in self.feeds["once feed"]]
        assert set(codes) <= {None, 0}, f"a --once feed exited {codes}: {self.logs()}"
        return codes == [0, 0]

    def close(self) -> None:
        for feeds in self.feeds.values():
            for feed in feeds:
                _kill(feed)
        self.sink.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.tmp.glob("*.log")) if "feed" in p.name
                         or "sink" in p.name)


def _logged(log: Path, text: bytes) -> bool:
    return text in log.read_bytes()


FEED = "ambrosia_services.connectors.clients.feed"


def _path() -> str:
    return os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def coordinator_pid(p: ImmortalProcess) -> int:
    found = p.wait_for("started the coordinator (pid")
    return int(found.rsplit("pid ", 1)[1].rstrip(")"))


def by_stream(data: bytes) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for ln in data.splitlines(keepends=True):
        out.setdefault(ln.split(b" ", 1)[0].decode(), []).append(ln)
    return out


@pytest.mark.slow
def test_every_line_is_committed_once_in_order_through_kill_9_of_every_part(
        launcher: Launcher, tmp_path: Path) -> None:
    seed = int(os.environ.get("CONNECTOR_CRASH_SEED", "0")) or random.randrange(1, 2**32)
    print(f"CONNECTOR_CRASH_SEED={seed}")  # pytest shows it when the test fails
    rng = random.Random(seed)
    for name in TAILED:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / ONCE).write_bytes(b"".join(line("c", i) for i in range(ONCE_LINES)))
    # The --once feed is busy only at the start; everything else anywhere after.
    kill_at = dict(zip(sorted(rng.sample(range(3, STEPS), len(KILLS))),
                       rng.sample(KILLS, len(KILLS)), strict=True))
    kill_at[rng.choice((0, 1))] = "once feed"
    pipe = Pipeline(launcher, tmp_path)
    try:
        for step in range(STEPS):
            for name in TAILED:
                stream = name[0]
                with (tmp_path / name).open("ab") as f:
                    f.write(b"".join(line(stream, i)
                                     for i in range(step * BURST, (step + 1) * BURST)))
            # A kill soon after a burst finds lines in flight at every stage.
            time.sleep(rng.uniform(0.0, 0.04))
            if step in kill_at:
                pipe.kill(kill_at[step])
            time.sleep(rng.uniform(0.0, 0.1))
        want = {"a": [line("a", i) for i in range(STEPS * BURST)],
                "b": [line("b", i) for i in range(STEPS * BURST)],
                "c": [line("c", i) for i in range(ONCE_LINES)]}
        committed = tmp_path / "sink" / "committed"

        def complete() -> bool:
            got = by_stream(committed.read_bytes()) if committed.exists() else {}
            # Committed output only grows, so at every moment it is a prefix of each stream.
            assert all(v == want[k][:len(v)] for k, v in got.items()), (
                f"seed {seed}: committed lines per stream "
                f"{ {k: len(v) for k, v in got.items()} } are not a prefix of the lines "
                f"sent; duplicates { {k: len(v) - len(set(v)) for k, v in got.items()} }")
            # A sink whose offset is not the committed one lost or gained committed bytes.
            stuck = [ln for p in launcher.procs for ln in p.lines if "refusing to send" in ln]
            assert not stuck, f"seed {seed}: {stuck[0]}"
            return pipe.once_done() and got == want

        try:
            wait_until(complete, "every line committed once", 60)
        except NeverHappenedError:
            got = by_stream(committed.read_bytes()) if committed.exists() else {}
            raise AssertionError(
                f"seed {seed}: committed lines per stream "
                f"{ {k: len(v) for k, v in got.items()} }, wanted "
                f"{ {k: len(v) for k, v in want.items()} }\n{pipe.logs()}") from None
        for text in (pipe.logs(), *("\n".join(p.lines) for p in launcher.procs)):
            assert "Traceback" not in text, f"seed {seed}: a traceback was logged:\n{text}"
    finally:
        pipe.close()


def test_the_binding_ends_without_a_traceback_when_its_coordinator_dies_mid_stream(
        launcher: Launcher) -> None:
    # A full queue holds the source's reader where the stop cancels it.
    (port,) = free_ports(1)
    p = launcher.start(TARGET, "coord", args=["--set", f"listen=127.0.0.1:{port}",
                                              "--set", "tuning.batch_messages=4"])
    p.wait_for("listening for sources")
    src = Source(port)
    src.hello()
    src.notify(1, "one")
    src.send(*lines(1, range(1, 3001)))
    os.kill(coordinator_pid(p), signal.SIGKILL)
    p.proc.wait(20)
    p.kill()
    assert not any("Traceback" in ln for ln in p.lines), "\n".join(p.lines)
    src.close()
