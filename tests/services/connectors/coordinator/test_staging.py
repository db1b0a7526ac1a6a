"""The source listener with a staging root, as a real process: what feeds send is staged
once (re-sends dropped before and after staging) through kill -9 of the binding and the
coordinator, segments nothing holds are deleted (those an earlier life wrote and never
referenced too), and credits wait while the backlog is over its bound."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_services.staging import MAGIC, segment_names

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import Launcher, wait_until

from .peers import Feed, MemorySink, Source, lines

pytestmark = pytest.mark.integration

TARGET = "tests.services.connectors.coordinator.staged_app:StagedSummary"
TUNED = "tests.services.connectors.tuned_app:TunedCoordinator"  # with a [tuning] table


def start(launcher: Launcher, tmp_path: Path, sink: MemorySink, port: int,
          **extra: object) -> ImmortalProcess:
    cfg = tmp_path / "coord.toml"
    if not cfg.exists():
        cfg.write_text(f'listen = "127.0.0.1:{port}"\ninterval_bytes = 200\n'
                       f'interval_seconds = 0.2\nstatus_seconds = 0.3\n'
                       f'status_file = "{tmp_path / "status.json"}"\n'
                       f'staging = "{tmp_path / "staging"}"\n'
                       f'[tuning]\nsegment_bytes = 8192\n'
                       f'[sinks]\nout = "127.0.0.1:{sink.port}"\n')
    args = ["--config", str(cfg)]
    for k, v in extra.items():
        args += ["--set", f"{k}={v}"]
    p = launcher.start(TARGET, "staged", args=args)
    p.wait_for("listening for sources")
    return p


def status(tmp_path: Path) -> dict[str, object]:
    try:
        return dict(json.loads((tmp_path / "status.json").read_text()))
    except (OSError, ValueError):
        return {}


def runs_of(committed: bytes) -> dict[int, list[tuple[int, int]]]:
    """stream -> (first, last) of every summary line, in commit order; the count and
    size of each line are checked against its ids."""
    out: dict[int, list[tuple[int, int]]] = {}
    for line in committed.decode().splitlines():
        sid, first, last, count, size = map(int, line.split())
        assert count == last - first + 1
        assert size == sum(len(b"s%d line %d\n" % (sid, i)) for i in range(first, last + 1))
        out.setdefault(sid, []).append((first, last))
    return out


N_LINES = 3000


@pytest.mark.slow
def test_every_message_is_staged_and_referenced_once_through_kill_9_and_segments_go(
        launcher: Launcher, tmp_path: Path) -> None:
    rng = random.Random()
    sink = MemorySink()
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port, **{"tuning.batch_messages": 16})
    staging = tmp_path / "staging"
    feeds = [Feed(port, sid, N_LINES, chunk=10, pause=0.01) for sid in (1, 2)]
    stray = "staged.0badc0ffee00-1.seg"  # an earlier life's, that died before its Impulse
    foreign = "other.0badc0ffee00-1.seg"  # another instance's, sharing the root
    for round_ in range(4):
        time.sleep(rng.uniform(0.2, 0.6))
        if round_ % 2:
            line = p.wait_for("started the coordinator (pid")
            os.kill(int(line.rsplit("pid ", 1)[1].rstrip(")")), signal.SIGKILL)
            p.proc.wait(20)
        p.kill()
        if round_ == 2:
            (staging / stray).write_bytes(MAGIC + b"a block nobody references")
            (staging / foreign).write_bytes(MAGIC + b"not this instance's to delete")
        p = start(launcher, tmp_path, sink, port, **{"tuning.batch_messages": 16})
    for f in feeds:
        f.join(90)
        assert len(f.resumes) > 1
    want = {sid: N_LINES for sid in (1, 2)}

    def complete() -> bool:
        runs = runs_of(sink.committed_bytes)
        return {s: r[-1][1] for s, r in runs.items()} == want

    wait_until(complete, "every line committed", 60)
    assert not sink.violations
    for sid, runs in runs_of(sink.committed_bytes).items():
        # Contiguous, in order, no message twice: each staged once and referenced once.
        assert runs[0][0] == 1, runs[:3]
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(runs)), (sid, runs)
    # Everything committed: every block is released and every segment but the one being
    # written is deleted, the stray one included.
    wait_until(lambda: status(tmp_path).get("staged", {}).get("backlog_bytes") == 0,
               "no backlog", 30)
    wait_until(lambda: len(segment_names(staging, "staged.")) <= 1, "segments deleted", 30)
    assert stray not in segment_names(staging)
    assert foreign in segment_names(staging)
    assert status(tmp_path)["staged"]["deleted_segments"] > 0  # type: ignore[index]
    p.stop()


def test_credits_wait_while_the_backlog_is_over_its_bound(launcher: Launcher,
                                                          tmp_path: Path) -> None:
    sink = MemorySink(votes=[False] * 10_000)  # nothing commits: the backlog only grows
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, sink, port, backlog_bytes=2000)
    src = Source(port)
    src.hello()
    src.notify(5, "five")
    sent = lines(5, range(1, 301))  # about 4,100 bytes: past the bound half-way
    for k in range(0, 300, 20):
        src.send(*sent[k:k + 20])
        src.wait_acked(5, k + 20)  # every message is ACKed (logged) ...
    held = src.credits_back
    assert held < 300  # ... but past the bound their credits are not given back
    wait_until(lambda: status(tmp_path).get("staged", {}).get("held_credits", 0) > 0,
               "credits held", 30)
    report = status(tmp_path)["staged"]
    assert report["backlog_bytes"] >= 2000 and report["backlog_limit"] == 2000  # type: ignore[index]
    sink.votes.clear()  # the sink commits again: the blocks go, the credits come back
    src.sock.settimeout(30)
    deadline = time.monotonic() + 30
    while src.credits_back < 301:  # one per MESSAGE, and the NOTIFY's
        assert time.monotonic() < deadline, (src.credits_back, status(tmp_path))
        assert src.step() is None
    assert src.credits_back == 301
    wait_until(lambda: status(tmp_path).get("staged", {}).get("backlog_bytes") == 0,
               "no backlog", 30)
    src.close()
    p.stop()


def test_a_coordinator_that_routes_payloads_itself_refuses_a_staging_root(
        launcher: Launcher, tmp_path: Path) -> None:
    cfg = tmp_path / "router.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\nstaging = "{tmp_path / "s"}"\n')
    p = launcher.start("tests.services.connectors.coordinator.staged_app:PayloadRouter",
                       "router", args=["--config", str(cfg)], primary=False)
    p.wait_for("staging: PayloadRouter keeps payloads in its state and cannot stage them; "
               "remove the key")
    assert p.proc.wait(60) != 0
    assert not (launcher.home / "instances").exists()  # refused before it was registered


# `make chaos`: kill -9 with a staging root stays in make test in
# test_every_message_is_staged_and_referenced_once_through_kill_9_and_segments_go.
@pytest.mark.chaos
@pytest.mark.slow
def test_the_connector_coordinator_commits_staged_payloads_exactly_through_kill_9(
        launcher: Launcher, tmp_path: Path) -> None:
    """The identity route with a staging root: the state holds references, the sink's
    link reads the payloads from the segments, and the sink gets every line once."""
    sink = MemorySink(votes=[True, False, True])  # an abort on the way, too
    (port,) = free_ports(1)
    cfg = tmp_path / "plain.toml"
    cfg.write_text(f'listen = "127.0.0.1:{port}"\ninterval_bytes = 2000\n'
                   f'interval_seconds = 0.2\nstatus_seconds = 0.3\n'
                   f'status_file = "{tmp_path / "status.json"}"\n'
                   f'staging = "{tmp_path / "staging"}"\n'
                   f'[tuning]\nsegment_bytes = 8192\nbatch_messages = 16\n'
                   f'[sinks]\nout = "127.0.0.1:{sink.port}"\n')

    def start_plain() -> ImmortalProcess:
        p = launcher.start(TUNED, "plain",
                           args=["--config", str(cfg)])
        p.wait_for("listening for sources")
        return p

    p = start_plain()
    feeds = [Feed(port, sid, N_LINES, chunk=10, pause=0.01) for sid in (1, 2)]
    for _ in range(3):
        time.sleep(random.uniform(0.2, 0.6))
        p.kill()
        p = start_plain()
    for f in feeds:
        f.join(90)
    want = {sid: b"".join(m.payload for m in lines(sid, range(1, N_LINES + 1)))
            for sid in (1, 2)}
    wait_until(lambda: per_stream(sink.committed_bytes) == want, "every stream committed", 60)
    assert not sink.violations
    wait_until(lambda: status(tmp_path).get("staged", {}).get("backlog_bytes") == 0,
               "no backlog", 30)
    wait_until(lambda: len(segment_names(tmp_path / "staging")) <= 1, "segments deleted", 30)
    report = status(tmp_path)
    assert report["sinks"]["out"]["pending_bytes"] == 0  # type: ignore[index]
    p.stop()


def per_stream(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for line in data.splitlines(keepends=True):
        sid = int(line[1:line.index(b" ")])
        out[sid] = out.get(sid, b"") + line
    return out


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB file system of its own (tmpfs, mounted by the test as root)."""
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)],
                   check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_staging_root_is_said_and_nothing_is_lost_or_doubled(
        launcher: Launcher, tmp_path: Path, small_disk: Path) -> None:
    """Nothing commits at first, so the staged bytes fill the root; the listener says so,
    acknowledges nothing it could not stage and closes the sources. Once the sink commits,
    segments are deleted, there is room again, and every line is committed once."""
    sink = MemorySink(votes=[False] * 10_000)
    (port,) = free_ports(1)
    cfg = tmp_path / "coord.toml"
    cfg.write_text(f'listen = "127.0.0.1:{port}"\ninterval_bytes = 200\n'
                   f'interval_seconds = 0.2\nstatus_seconds = 0.3\n'
                   f'status_file = "{tmp_path / "status.json"}"\n'
                   f'staging = "{small_disk}"\n[tuning]\nsegment_bytes = 16384\n'
                   f'[sinks]\nout = "127.0.0.1:{sink.port}"\n')
    p = start(launcher, tmp_path, sink, port)
    n = 40_000  # about 620 KiB of lines: more than the root holds
    feed = Feed(port, 1, n, chunk=200)
    p.wait_for("is full (No space left on device)")
    line = p.wait_for("staging: the staging root")
    assert "messages not acknowledged, sources closed" in line
    assert not feed.done.is_set()
    sink.votes.clear()
    feed.join(120)
    wait_until(lambda: runs_of(sink.committed_bytes).get(1, [(0, 0)])[-1][1] == n,
               "the last line committed", 60)
    runs = runs_of(sink.committed_bytes)[1]
    assert runs[0][0] == 1
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(runs))
    assert not sink.violations
    assert status(tmp_path)["staged"]["failures"] >= 1  # type: ignore[index]
    p.stop()
