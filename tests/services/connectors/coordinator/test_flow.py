"""The coordinator as a real process: a scripted source over a socket, a scripted 2PC
sink in this process, the coordinator killed with -9 and restarted."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest
from ambrosia_services.connectors import EosMessage, Restart

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, repro
from tests.launcher import Launcher, wait_until

from ..tuned_app import TunedCoordinator
from .peers import FROM_START, Feed, MemorySink, Source, lines

pytestmark = pytest.mark.integration

N_LINES = 3000
# The shipped service, with its fixed settings open to a test's --set tuning.KEY=VALUE.
TARGET = "tests.services.connectors.tuned_app:TunedCoordinator"


def start(launcher: Launcher, tmp_path: Path, sink: MemorySink, port: int,
          name: str = "coord", **extra: object) -> ImmortalProcess:
    cfg = tmp_path / "coord.toml"
    if not cfg.exists():
        cfg.write_text(f'listen = "127.0.0.1:{port}"\ninterval_bytes = 200\n'
                       f'interval_seconds = 0.2\nstatus_seconds = 0.5\n'
                       f'status_file = "{tmp_path / "status.json"}"\n'
                       f'[sinks]\nout = "127.0.0.1:{sink.port}"\n')
    args = ["--config", str(cfg)]
    for k, v in extra.items():
        args += ["--set", f"{k}={v}"]
    p = launcher.start(TARGET, name, args=args)
    p.wait_for("listening for sources")
    return p


def expected(sid: int, n: int) -> bytes:
    return b"".join(m.payload for m in lines(sid, range(1, n + 1)))


def test_lines_are_committed_once_in_order_and_acked_after_apply(
        launcher: Launcher, tmp_path: Path) -> None:
    sink = MemorySink()
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port)
    src = Source(port)
    src.hello()
    assert src.notify(5, "five").point_of_reference == FROM_START
    src.send(*lines(5, range(1, 101)))
    src.wait_acked(5, 100)
    src.close()
    p.kill()  # ACKed means logged: all 100 are there after a kill -9
    p = start(launcher, tmp_path, sink, port)
    src = Source(port)
    src.hello()
    assert src.notify(5, "five").point_of_reference == 100
    src.send(*lines(5, range(100, 121)))  # 100 again: a re-send, dropped
    src.wait_acked(5, 120)
    credits = src.credits_back
    src.send(EosMessage(5))
    wait_until(lambda: src.step() is None and src.credits_back > credits,
               "the source's ACK", 30)  # its ACK
    wait_until(lambda: sink.committed_bytes == expected(5, 120), "every line committed", 30)
    assert not sink.violations
    status = tmp_path / "status.json"
    wait_until(lambda: status.exists() and json.loads(status.read_text())["sinks"]["out"][
        "committed"] == len(expected(5, 120)), "the status file's commits", 30)
    report = json.loads(status.read_text())
    assert report["streams"]["5"] == {"name": "five", "applied": 120, "dropped": 1,
                                      "por": 120, "closed": True, "lines": 120}
    assert (report["received"], report["acked"], report["lag"]) == (21, 21, 0)  # this life
    assert report["sinks"]["out"]["pending_bytes"] == 0 and report["linked"] == {"out": True}
    p.stop()
    assert isinstance(src.next(), Restart)  # an ordinary stop tells sources to reconnect
    # The log replays to the same state and outputs, with no configuration at all: the
    # configuration reached the state only through the logged configure Impulse.
    replay = repro("coord", TunedCoordinator, home=launcher.home)
    assert replay.status == "ok"
    assert replay.state.core.streams[5].por == 120
    assert replay.state.core.sinks["out"].committed == len(expected(5, 120))


def coordinator_pid(p: ImmortalProcess) -> int:
    line = p.wait_for("started the coordinator (pid")
    return int(line.rsplit("pid ", 1)[1].rstrip(")"))


@pytest.mark.slow
# `make chaos`: kill -9 of the binding and of the coordinator alone, mid-stream, stays in
# make test in tests/services/connectors/test_crashes.py, with the real feeds and sink.
@pytest.mark.chaos
def test_kill_9_mid_stream_commits_every_line_once(launcher: Launcher,
                                                    tmp_path: Path) -> None:
    rng = random.Random()
    sink = MemorySink()
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port, **{"tuning.batch_messages": 16})
    feeds = [Feed(port, sid, N_LINES, chunk=10, pause=0.01) for sid in (1, 2)]
    for round_ in range(4):
        time.sleep(rng.uniform(0.2, 0.6))
        if round_ % 2:
            os.kill(coordinator_pid(p), signal.SIGKILL)  # the coordinator alone
            p.proc.wait(20)
        p.kill()  # the binding (with whatever is left of the group)
        p = start(launcher, tmp_path, sink, port, **{"tuning.batch_messages": 16})
    for f in feeds:
        f.join(60)
        assert len(f.resumes) > 1  # it was cut off mid-stream at least once
        # ACKed means applied and logged: a restart never resumes below it.
        assert all((por != FROM_START and por >= acked) or acked == 0
                   for acked, por in f.resumes), f.resumes
    want = {sid: expected(sid, N_LINES) for sid in (1, 2)}
    wait_until(lambda: per_stream(sink.committed_bytes) == want, "every stream committed", 30)
    assert not sink.violations
    p.stop()


def per_stream(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for line in data.splitlines(keepends=True):
        sid = int(line[1:line.index(b" ")])
        out[sid] = out.get(sid, b"") + line
    return out


def test_aborts_and_cut_links_are_settled_and_committed_once(launcher: Launcher,
                                                             tmp_path: Path) -> None:
    # The first Phase1 loses its link before the vote (listed, undecided: aborted); the
    # next is voted yes and its link is cut before the Phase2 (listed, decided: committed
    # by the settlement); the next is voted no (aborted, its bytes sent again).
    sink = MemorySink(votes=[True, False], drop_after_phase1=True, drop_after_vote=True)
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port)
    src = Source(port)
    src.hello()
    src.notify(3, "three")
    src.send(*lines(3, range(1, 41)))
    src.wait_acked(3, 40)
    wait_until(lambda: sink.committed_bytes == expected(3, 40), "the first lines committed", 30)
    t1, t2 = sink.phase1s
    assert t1 != t2
    assert sink.listed[1:] == [(t1,), (t2,)]
    assert sink.phase2s == [(t1, False), (t2, True)]
    src.send(*lines(3, range(41, 61)))
    wait_until(lambda: sink.committed_bytes == expected(3, 60), "the next lines committed", 30)
    t3, t4 = sink.phase1s[2:]
    assert sink.phase2s[2:] == [(t3, False), (t4, True)]
    assert not sink.violations
    src.close()
    p.stop()


def commit_ten_lines(launcher: Launcher, tmp_path: Path, sink: MemorySink,
                     port: int) -> None:
    """A coordinator's life that commits lines 1..10 of stream 4 to ``sink``, then stops."""
    p = start(launcher, tmp_path, sink, port)
    src = Source(port)
    src.hello()
    src.notify(4, "four")
    src.send(*lines(4, range(1, 11)))
    src.wait_acked(4, 10)
    wait_until(lambda: sink.committed_bytes == expected(4, 10), "every line committed", 30)
    src.close()
    p.stop()


def test_a_restarted_sink_that_says_offset_0_still_gets_the_next_transactions(
        launcher: Launcher, tmp_path: Path) -> None:
    """aloc_sink after its restart answers NOTIFY with 0 (from memory) though its file holds
    every committed byte: as Wallaroo's sink side, the coordinator goes on from what it
    committed (it used to refuse, ten times a second, for ever)."""
    sink = MemorySink()
    (port,) = free_ports(1)
    commit_ten_lines(launcher, tmp_path, sink, port)
    sink.restarted = True
    p = start(launcher, tmp_path, sink, port)
    p.wait_for(f"says offset 0, below the {len(expected(4, 10))} bytes committed")
    src = Source(port)
    src.hello()
    src.notify(4, "four")
    src.send(*lines(4, range(11, 21)))
    src.wait_acked(4, 20)
    wait_until(lambda: sink.committed_bytes == expected(4, 20), "every line committed", 30)
    assert not sink.violations
    src.close()
    p.stop()


def test_a_sink_that_lost_committed_bytes_commits_nothing_and_is_asked_with_back_off(
        launcher: Launcher, tmp_path: Path) -> None:
    sink = MemorySink()
    (port,) = free_ports(1)
    commit_ten_lines(launcher, tmp_path, sink, port)
    empty = MemorySink()  # "the same sink", its output gone
    p = start(launcher, tmp_path, empty, port, **{"sinks.out": f"127.0.0.1:{empty.port}"})
    src = Source(port)
    src.hello()
    src.notify(4, "four")
    src.send(*lines(4, range(11, 21)))
    src.wait_acked(4, 20)  # sources go on; output waits in the state
    # Its own checks refuse every transaction (data past its offset, a Phase1 not at its
    # committed offset); the coordinator asks again, with back-off, and says so once.
    p.wait_for("voted no on 3 transactions in a row; asking again with back-off")
    assert empty.committed == 0 and all(not commit for _, commit in empty.phase2s)
    assert not empty.violations  # nothing committed was cut
    asked = len(empty.phase1s)
    time.sleep(1.0)
    assert len(empty.phase1s) - asked <= 4  # not a tight loop
    p.stop()
