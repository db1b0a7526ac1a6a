"""The coordinator as an active/active replica set (each replica its own IC and binding,
listening on its own address when primary) between a real feed, given several replicas'
addresses, and a real 2PC file sink. The primary is kill -9ed and a standby takes over,
or an upgrader replica takes over with the next version; either way the feed finds the
new primary and the committed output holds every line once, in order."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, start_immortal
from tests.ic.conftest import Harness
from tests.launcher import ROOT, wait_until

from ..clients.helpers import SinkProcess
from .test_lifecycle import V1, append, committed_lines, feed, line

pytestmark = pytest.mark.integration

TARGET = "ambrosia_services.connectors:ConnectorCoordinator"
NAME = "coord"
BURST = 1500  # lines per burst of the tailed file; the coordinator grants 1000 credits
ONCE_LINES = 2500


class ReplicaSet:
    """Replicas 0 (primary), 1 (checkpointing secondary) and 2 of the coordinator;
    replica n listens on ``listen[n]`` when primary."""

    def __init__(self, h: Harness, tmp: Path, sink_port: int, **replica2: int) -> None:
        self.h, self.tmp = h, tmp
        h.register(NAME, active_active=True)
        h.add_replica(NAME, 1)
        h.add_replica(NAME, 2, **replica2)
        self.listen = free_ports(3)
        self.sink_port = sink_port
        self.ics: dict[int, subprocess.Popen[str]] = {}
        self.bindings: dict[int, ImmortalProcess] = {}

    def start(self, n: int, *args: str) -> ImmortalProcess:
        # Each replica's binding reads its own configuration: its own listen address.
        cfg = self.tmp / f"coord{n}.toml"
        cfg.write_text(f'listen = "127.0.0.1:{self.listen[n]}"\ninterval_bytes = 8192\n'
                       f'interval_seconds = 0.05\n'
                       f'[sinks]\nout = "127.0.0.1:{self.sink_port}"\n')
        self.ics[n] = self.h.start(NAME, n)
        rep = registry.replica(self.h.reg(NAME), n, self.h.home)
        p = start_immortal(TARGET, NAME, home=self.h.home, cwd=ROOT, primary=False, args=[
            "--receive-port", str(rep.receive_port), "--send-port",
            str(rep.send_port), "--config", str(cfg), *args])
        self.bindings[n] = p
        return p

    def ic_says(self, n: int, text: str) -> bool:
        return text in self.h.stderr_of(self.ics[n])

    def kill9(self, n: int) -> None:
        os.kill(self.bindings[n].proc.pid, signal.SIGKILL)
        self.h.kill9(self.ics[n])
        self.bindings[n].kill()

    def close(self) -> None:
        for p in self.bindings.values():
            p.kill()


def _through(harness: Harness, tmp: Path, upgrade: bool) -> ReplicaSet:
    """Stream through replica 0, move to replica 2 (kill -9 of replica 0, or replica 2
    upgrading live), stream on; check the committed output and return the set."""
    (sink_port,) = free_ports(1)
    sink = SinkProcess(tmp / "sink", tmp / "sink.log", port=sink_port)
    rs = ReplicaSet(harness, tmp, sink_port, **({"upgrade_version": 1} if upgrade else {}))
    tailed, once = tmp / "a.log", tmp / "c.log"
    tailed.write_bytes(b"")
    to = ["--connect", f"127.0.0.1:{rs.listen[0]}", "--connect", f"127.0.0.1:{rs.listen[2]}"]
    feeds = []
    try:
        first = rs.start(0)
        first.wait_for("became primary")
        first.wait_for("listening for sources")
        rs.start(1)
        wait_until(lambda: rs.ic_says(1,
                   "as the checkpointer"), "replica 1 as the checkpointer", 30)
        feeds.append(feed(tmp, "feed-a.log", *to, "a.log"))
        append(tailed, "a", 0, BURST)
        wait_until(lambda: len(committed_lines(tmp / "sink")) > 0, "a first line committed", 30)
        append(tailed, "a", BURST, BURST)  # in flight when the primary goes
        if upgrade:
            nxt = rs.start(2, "--upgrade-to", V1)
            nxt.wait_for("upgraded to CoordinatorV1 version 1 (live)")
            assert first.proc.wait(30) != 0  # fenced off by the upgrader
        else:
            nxt = rs.start(2)
            wait_until(lambda: rs.ic_says(2, "as the standby"), "replica 2 as the standby", 30)
            rs.kill9(0)
        nxt.wait_for("became primary")
        nxt.wait_for("listening for sources")
        append(tailed, "a", 2 * BURST, BURST)
        # More lines than the credits OK grants: it ends only if ACKs keep coming.
        once.write_bytes(b"".join(line("c", i) for i in range(ONCE_LINES)))
        feeds.append(feed(tmp, "feed-c.log", *to, "--once", "c.log"))
        want = {"a": [line("a", i) for i in range(3 * BURST)],
                "c": [line("c", i) for i in range(ONCE_LINES)]}

        def complete() -> bool:
            got: dict[str, list[bytes]] = {"a": [], "c": []}
            for ln in committed_lines(tmp / "sink"):
                got[ln[:1].decode()].append(ln)
            assert all(v == want[k][:len(v)] for k, v in got.items()), (
                "the committed lines per stream are not a prefix of the lines sent: "
                f"{ {k: len(v) for k, v in got.items()} }")
            return got == want

        wait_until(complete, "every line committed", 60)
        assert feeds[1].wait(30) == 0, (tmp / "feed-c.log").read_text()
        assert f"connected to 127.0.0.1:{rs.listen[2]}" in (tmp / "feed-a.log").read_text()
        for n, p in rs.bindings.items():
            assert not any("Traceback" in ln for ln in p.lines), "\n".join(p.lines)
            assert not rs.ic_says(n, "dropped an Impulse")
        return rs
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


@pytest.mark.slow
def test_kill_9_of_the_primary_the_feed_moves_to_the_standby_every_line_once(
        harness: Harness, tmp_path: Path) -> None:
    rs = _through(harness, tmp_path, upgrade=False)
    assert rs.ic_says(2, "primary of epoch 2")


# `make chaos`: in make test an upgrader replica takes over under load in
# tests/activeactive/test_upgrade, the feed follows a new primary above, and the connector
# coordinator's state is carried whole to a next version in tests/immortal/test_upgrade_rule.
@pytest.mark.slow
@pytest.mark.chaos
def test_an_upgrader_replica_takes_over_with_version_1_every_line_once(
        harness: Harness, tmp_path: Path) -> None:
    rs = _through(harness, tmp_path, upgrade=True)
    assert rs.ic_says(2, "upgraded to version 1")
