"""The coordinator across a live upgrade, with a real feed streaming, a real 2PC file
sink committing, and the status RPC called by another immortal at the end."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ambrosia_services.connectors.clients import stream_id_of

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import upgrade_test
from tests.launcher import ROOT, Launcher, wait_until

from ..clients.helpers import SinkProcess
from .versions import CoordinatorV1, CoordinatorV2

pytestmark = pytest.mark.integration

TARGET = "ambrosia_services.connectors:ConnectorCoordinator"
V1 = "tests.services.connectors.coordinator.versions:CoordinatorV1"
V2 = "tests.services.connectors.coordinator.versions:CoordinatorV2"
PROBE = "tests.services.connectors.coordinator.versions:StatusProbe"
BURST = 1500  # lines per burst of the tailed file; the coordinator grants 1000 credits
ONCE_LINES = 2500


def line(stream: str, i: int) -> bytes:
    return f"{stream} {i:06d} {'y' * (i % 17)}\n".encode()


def append(path: Path, stream: str, start: int, n: int) -> None:
    with path.open("ab") as f:
        f.write(b"".join(line(stream, i) for i in range(start, start + n)))


FEED = "ambrosia_services.connectors.clients.feed"


def feed(tmp: Path, log: str, *args: str) -> subprocess.Popen[bytes]:
    with (tmp / log).open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.services.tuned", FEED, f"{FEED}.BACKOFF_CAP=0.05",
             f"{FEED}.POLL_SECONDS=0.01", "--", *args],
            cwd=tmp, stdout=out, stderr=out,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(ROOT), os.environ.get("PYTHONPATH", "")])))


def committed_lines(sink_dir: Path) -> list[bytes]:
    """The whole lines of the sink's committed file: a commit copies its range there in
    chunks, so a read during a copy may end inside a line, which is left for later."""
    path = sink_dir / "committed"
    lines = path.read_bytes().splitlines(keepends=True) if path.exists() else []
    return lines if not lines or lines[-1].endswith(b"\n") else lines[:-1]


def ask_status(launcher: Launcher, probe: str) -> dict[str, object]:
    """The coordinator's status, as another immortal's call gets it."""
    p = launcher.start(PROBE, probe)
    answer = json.loads(p.wait_for("status answer: ").split("status answer: ", 1)[1])
    p.stop()
    return dict(answer)


@pytest.mark.slow
def test_a_live_upgrade_while_a_feed_streams_commits_every_line_once_and_acks_go_on(
        launcher: Launcher, tmp_path: Path) -> None:
    port, sink_port = free_ports(2)
    cfg = tmp_path / "coord.toml"
    cfg.write_text(f'listen = "127.0.0.1:{port}"\ninterval_bytes = 8192\n'
                   f'interval_seconds = 0.05\n[sinks]\nout = "127.0.0.1:{sink_port}"\n')
    sink = SinkProcess(tmp_path / "sink", tmp_path / "sink.log", port=sink_port)
    tailed, once = tmp_path / "a.log", tmp_path / "c.log"
    tailed.write_bytes(b"")
    feeds: list[subprocess.Popen[bytes]] = []
    try:
        v0 = launcher.start(TARGET, "coord", args=["--config", str(cfg)])
        v0.wait_for("listening for sources")
        feeds.append(feed(tmp_path, "feed-a.log", "--connect", f"127.0.0.1:{port}", "a.log"))
        append(tailed, "a", 0, BURST)
        wait_until(lambda: len(committed_lines(tmp_path / "sink")) > 0,
                   "a first line committed", 30)
        append(tailed, "a", BURST, BURST)  # in flight while version 0 stops
        assert v0.stop() == 0
        append(tailed, "a", 2 * BURST, BURST)  # written while no primary runs
        v1 = launcher.start(TARGET, "coord", args=["--config", str(cfg), "--upgrade-to", V1])
        v1.wait_for("upgraded to CoordinatorV1 version 1 (live)")
        v1.wait_for("listening for sources")
        append(tailed, "a", 3 * BURST, BURST)
        # More lines than the credits OK grants: it ends only if ACKs keep coming.
        once.write_bytes(b"".join(line("c", i) for i in range(ONCE_LINES)))
        feeds.append(feed(tmp_path, "feed-c.log", "--connect", f"127.0.0.1:{port}", "--once",
                          "c.log"))
        want = {"a": [line("a", i) for i in range(4 * BURST)],
                "c": [line("c", i) for i in range(ONCE_LINES)]}

        def complete() -> bool:
            got: dict[str, list[bytes]] = {"a": [], "c": []}
            for ln in committed_lines(tmp_path / "sink"):
                got[ln[:1].decode()].append(ln)
            assert all(v == want[k][:len(v)] for k, v in got.items()), (
                "the committed lines per stream are not a prefix of the lines sent: "
                f"{ {k: len(v) for k, v in got.items()} }")
            return got == want

        wait_until(complete, "every line committed", 60)
        assert feeds[1].wait(30) == 0, (tmp_path / "feed-c.log").read_text()
        # The status RPC, called by another immortal, from the state of version 1.
        before = ask_status(launcher, "probe-1")
        # Version 1 -> 2, which adds nothing, with lines in flight and a kill -9 at a
        # random moment of the switch: version 1's own count goes on, not from 0.
        append(tailed, "a", 4 * BURST, BURST)
        assert v1.stop() == 0
        args = ["--config", str(cfg), "--upgrade-to", V2]
        v2 = launcher.start(V1, "coord", args=args, primary=False)
        v2.wait_for("registered the upgrade of coord from version 1 to version 2")
        time.sleep(random.uniform(0.0, 1.5))
        v2.kill()
        v2 = launcher.start(V1, "coord", args=args)
        v2.wait_for("listening for sources")
        append(tailed, "a", 5 * BURST, BURST)
        want["a"] = [line("a", i) for i in range(6 * BURST)]
        wait_until(complete, "every line committed", 60)
        feed_log = (tmp_path / "feed-a.log").read_text()
        # It reconnected (told by RESTART, or by a reset when the stop closed the socket
        # with its lines unread) and logged no warning storm on the way.
        assert feed_log.count("connected to") >= 3 and "raised exception" not in feed_log
        answer = ask_status(launcher, "probe-2")
        assert answer["v1_runs"] > before["v1_runs"] > 0
        assert v2.stop() == 0
        # The upgrade test replays version 1's history (from its newest checkpoint)
        # converted, then version 2's: it ends in the state the live run answered with.
        replayed = upgrade_test("coord", CoordinatorV1, CoordinatorV2, home=launcher.home)
        assert replayed.status == "ok" and isinstance(replayed.state, CoordinatorV2)
        assert {**replayed.state.core.status(), "v1_runs": replayed.state.v1_runs} == answer
    finally:
        for f in feeds:
            if f.poll() is None:
                f.kill()
            f.wait()
        sink.kill()
    a_bytes, c_bytes = (b"".join(want[k]) for k in ("a", "c"))
    streams = answer["streams"]
    assert set(streams) == {str(stream_id_of("a.log")), str(stream_id_of("c.log"))}
    a, c = streams[str(stream_id_of("a.log"))], streams[str(stream_id_of("c.log"))]
    # A line's message id is its start offset: the point of reference is the last line's.
    assert (a["name"], a["applied"], a["por"], a["closed"]) == (
        "a.log", 6 * BURST, len(a_bytes) - len(want["a"][-1]), False)
    assert (c["name"], c["applied"], c["por"], c["closed"]) == (
        "c.log", ONCE_LINES, len(c_bytes) - len(want["c"][-1]), True)
    out = answer["sinks"]["out"]
    assert out["committed"] == len(a_bytes) + len(c_bytes)
    assert (out["pending_bytes"], out["txn"]) == (0, None)
    assert out["commits"] >= 2
    assert answer["v1_runs"] > 0  # the lines after the upgrade went through version 1's code
