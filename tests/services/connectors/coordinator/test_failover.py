"""The coordinator as an active/active replica set (primary, checkpointing secondary,
standby; each its own IC and binding, each listening on its own address when primary)
with a real feed given the primary's and the standby's addresses and a real 2PC file
sink: kill -9 of the primary's IC and binding; the standby takes over, listens, the feed
finds it, and the committed output holds every line once, in order."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_py.runtime.cli import free_ports
from ambrosia_py.testing import ImmortalProcess, start_immortal
from tests.ic.conftest import Harness
from tests.launcher import ROOT, wait_until

from ..clients.helpers import SinkProcess
from .test_lifecycle import append, committed_lines, feed, line

pytestmark = pytest.mark.integration

TARGET = "services.connectors:ConnectorCoordinator"
NAME = "coord"
BURST = 1500
ONCE_LINES = 2500


class ReplicaSet:
    """Three replicas of the coordinator; replica n listens on ``listen[n]``."""

    def __init__(self, h: Harness, tmp: Path, sink_port: int) -> None:
        self.h, self.tmp = h, tmp
        h.register(NAME, active_active=True)
        for n in (1, 2):
            h.add_replica(NAME, n)
        self.listen = free_ports(3)
        self.sink_port = sink_port
        self.ics: dict[int, object] = {}
        self.bindings: dict[int, ImmortalProcess] = {}

    def start(self, n: int) -> ImmortalProcess:
        # Each replica's binding reads its own configuration: its own listen address.
        cfg = self.tmp / f"coord{n}.toml"
        cfg.write_text(f'listen = "127.0.0.1:{self.listen[n]}"\ninterval_bytes = 8192\n'
                       f'interval_seconds = 0.05\n'
                       f'[sinks]\nout = "127.0.0.1:{self.sink_port}"\n')
        self.ics[n] = self.h.start(NAME, n)
        rep = registry.replica(self.h.reg(NAME), n, self.h.home)
        p = start_immortal(TARGET, NAME, home=self.h.home, cwd=ROOT, primary=False, args=[
            "--ic-receive-port", str(rep.receive_port), "--ic-send-port",
            str(rep.send_port), "--config", str(cfg)])
        self.bindings[n] = p
        return p

    def kill9(self, n: int) -> None:
        os.kill(self.bindings[n].proc.pid, signal.SIGKILL)
        self.h.kill9(self.ics[n])  # type: ignore[arg-type]
        self.bindings[n].kill()

    def close(self) -> None:
        for p in self.bindings.values():
            p.kill()


@pytest.mark.slow
def test_kill_9_of_the_primary_the_feed_moves_to_the_standby_every_line_once(
        harness: Harness, tmp_path: Path) -> None:
    (sink_port,) = free_ports(1)
    sink = SinkProcess(tmp_path / "sink", tmp_path / "sink.log", port=sink_port)
    rs = ReplicaSet(harness, tmp_path, sink_port)
    tailed, once = tmp_path / "a.log", tmp_path / "c.log"
    tailed.write_bytes(b"")
    to = ["--to", f"127.0.0.1:{rs.listen[0]}", "--to", f"127.0.0.1:{rs.listen[2]}"]
    feeds = []
    try:
        first = rs.start(0)
        first.wait_for("became primary")
        first.wait_for("listening for sources")
        rs.start(1)
        wait_until(lambda: "as the checkpointer" in harness.stderr_of(rs.ics[1]), 30)  # type: ignore[arg-type]
        standby = rs.start(2)
        wait_until(lambda: "as the standby" in harness.stderr_of(rs.ics[2]), 30)  # type: ignore[arg-type]
        feeds.append(feed(tmp_path, "feed-a.log", *to, "a.log"))
        append(tailed, "a", 0, BURST)
        wait_until(lambda: len(committed_lines(tmp_path / "sink")) > 0, 30)
        append(tailed, "a", BURST, BURST)  # in flight when the primary dies
        rs.kill9(0)
        standby.wait_for("became primary")
        standby.wait_for("listening for sources")
        append(tailed, "a", 2 * BURST, BURST)
        once.write_bytes(b"".join(line("c", i) for i in range(ONCE_LINES)))
        feeds.append(feed(tmp_path, "feed-c.log", *to, "--once", "c.log"))
        want = {"a": [line("a", i) for i in range(3 * BURST)],
                "c": [line("c", i) for i in range(ONCE_LINES)]}

        def complete() -> bool:
            got: dict[str, list[bytes]] = {"a": [], "c": []}
            for ln in committed_lines(tmp_path / "sink"):
                got[ln[:1].decode()].append(ln)
            assert all(v == want[k][:len(v)] for k, v in got.items()), (
                "the committed lines per stream are not a prefix of the lines sent: "
                f"{ {k: len(v) for k, v in got.items()} }")
            return got == want

        wait_until(complete, 60)
        assert feeds[1].wait(30) == 0, (tmp_path / "feed-c.log").read_text()
        assert f"connected to 127.0.0.1:{rs.listen[2]}" in (
            tmp_path / "feed-a.log").read_text()
        for p in rs.bindings.values():
            assert not any("Traceback" in ln for ln in p.lines), "\n".join(p.lines)
    except BaseException:
        for n, p in rs.bindings.items():
            print(f"--- replica {n}\n" + "\n".join(p.lines[-30:]))
        raise
    finally:
        for f in feeds:
            if f.poll() is None:
                f.kill()
            f.wait()
        sink.kill()
        rs.close()
