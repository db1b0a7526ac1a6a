"""The log store on a real cluster: epochs fence an old primary for every reader,
checkpoints come back only with their check bytes right, and replicas in separate
processes (killed with ``kill -9``, paused past the lease, with a Raft peer killed)
append every request exactly once, in order."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from ambrosia_ic.errors import LockLostError, LogCorruptionError
from ambrosia_ic.logstore.raft_entries import (
    EpochClaimed,
    Fenced,
    InstanceView,
    Records,
    encode_checkpoint_end,
)
from ambrosia_ic.logstore.raft_store import LEASE, RaftLogStore
from ambrosia_ic.raft.client import RaftClient
from ambrosia_ic.raft.cluster import LocalCluster

from tests.launcher import wait_until

from .conftest import SECRET, restart_missing
from .replica_worker import EXIT_FENCED

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def fresh() -> str:
    return f"inst-{uuid.uuid4().hex[:8]}"


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(body())  # type: ignore[arg-type]


async def committed(c: LocalCluster, name: str) -> tuple[list[bytes], InstanceView]:
    """Every record that counts, read by a reader of its own from the start."""
    reader = RaftLogStore(c.address, name)
    try:
        events = await reader.catch_up()
    finally:
        reader.close()
    return [r for ev in events if isinstance(ev, Records) for r in ev.records], reader.view


def test_a_standby_that_lost_the_race_does_not_claim_past_the_winner(
        cluster: LocalCluster) -> None:
    """Two standbys find the same primary silent at once: the first claim wins, and the
    second, catching up, sees it and claims nothing (it would fence the new primary)."""
    name = fresh()

    async def body() -> None:
        a, b = RaftLogStore(cluster.address, name), RaftLogStore(cluster.address, name)
        try:
            assert await b.claim({"replica": 0}) and b.held == 1
            await a.catch_up()
            assert a.view.epoch == 1
            assert await b.claim({"replica": 1}, after=1) and b.held == 2
            # a still takes epoch 1 for the newest: the race is lost when it catches up.
            assert not await a.claim({"replica": 2}, after=1)
            assert a.held is None and a.view.epoch == 2
            await b.append([b"b0"])  # the winner is not fenced
        finally:
            a.close()
            b.close()
        assert (await committed(cluster, name))[1].epoch == 2

    run(body)


def test_a_newer_claim_fences_the_old_primary(cluster: LocalCluster) -> None:
    name = fresh()

    async def body() -> None:
        a, b = RaftLogStore(cluster.address, name), RaftLogStore(cluster.address, name)
        try:
            assert await a.claim({"replica": 1}) and a.held == 1
            await a.append([b"a0", b"a1"])
            assert await b.claim({"replica": 2}) and b.held == 2
            # It reaches the log, after the claim, and no reader counts it: said so.
            with pytest.raises(LockLostError, match=r"fenced off and writes no more \(an "
                               r"entry it sent before it saw the claim counts for no reader"):
                await a.append([b"a2"])
            with pytest.raises(LockLostError):
                await a.append([b"a3"])  # refused before sending
            await b.append([b"b0"])
        finally:
            a.close()
            b.close()
        records, view = await committed(cluster, name)
        assert records == [b"a0", b"a1", b"b0"]
        assert view.epoch == 2 and view.holder == {"replica": 2}
        assert view.fenced_count == 1
    run(body)


def test_a_primary_silent_past_half_its_lease_looks_before_writing_and_writes_nothing(
        cluster: LocalCluster) -> None:
    """A primary that sent nothing that counted for half a lease (paused, stalled) may
    have been replaced: it reads the log before its next entry, and finding the newer
    claim it sends nothing, heartbeat or records (no entry of its epoch after the claim)."""
    name = fresh()

    async def body() -> None:
        # Half a lease (1 s) is what a busy machine must not spend between two steps
        # meant to come within it (0.2 s was too little there).
        a = RaftLogStore(cluster.address, name, lease=2.0)
        b = RaftLogStore(cluster.address, name, lease=2.0)
        try:
            assert await a.claim({"replica": 1})
            await a.append([b"a0"])
            await a.heartbeat()  # within half a lease: no look first, and none needed
            await asyncio.sleep(1.05)  # a is paused past half its lease
            assert await b.claim({"replica": 2})
            with pytest.raises(LockLostError, match="epoch 2 was claimed after this "
                               "primary's epoch 1"):
                await a.heartbeat()
            with pytest.raises(LockLostError):
                await a.append([b"a1"])
            await b.append([b"b0"])
        finally:
            a.close()
            b.close()
        records, view = await committed(cluster, name)
        assert records == [b"a0", b"b0"]
        # b holds epoch 2, or a later one it renewed with itself if its append came past
        # half its lease after its claim (a busy machine): either way, a wrote nothing.
        assert view.epoch >= 2 and view.holder == {"replica": 2}, (view.epoch, view.holder)
        assert view.fenced_count == 0

    run(body)


def test_a_primary_silent_past_half_its_lease_renews_by_claiming_before_it_writes(
        cluster: LocalCluster) -> None:
    """A look that finds no newer claim does not stop one in flight: a primary that sent
    nothing that counted for half a lease claims the next epoch itself (the first claim of
    an epoch wins, so a standby's claim in flight would fence it), then writes on."""
    name = fresh()

    async def body() -> None:
        # A lease long enough that the heartbeat right after the renewal comes within
        # half of it even on a busy machine (0.4 s was not: 0.2 s passed there).
        a = RaftLogStore(cluster.address, name, lease=2.0)
        renewed: list[int] = []
        a.on_renewed = renewed.append  # the replica rewrites its epoch file there
        try:
            assert await a.claim({"replica": 1}) and a.held == 1
            await a.append([b"a0"])
            assert renewed == []  # a first claim is no renewal
            await asyncio.sleep(1.05)  # paused past half its lease, nobody claimed
            await a.append([b"a1"])
            assert a.held == 2 and a.view.holder == {"replica": 1}
            assert renewed == [2]
            await a.heartbeat()  # within half a lease of the renewal: no new claim
            assert a.held == 2 and renewed == [2]
        finally:
            a.close()
        records, view = await committed(cluster, name)
        assert records == [b"a0", b"a1"]
        assert view.epoch == 2 and view.fenced_count == 0

    run(body)


def test_racing_claims_have_one_winner(cluster: LocalCluster) -> None:
    name = fresh()

    async def body() -> None:
        stores = [RaftLogStore(cluster.address, name) for _ in range(3)]
        try:
            # Each claims epoch 1 as a standby does (``after=0``: the epoch it found
            # silent); a store whose first read already finds epoch 1 claims nothing, so
            # however the three interleave, exactly one holds it. (Without ``after``, a
            # store that reads after another's claim committed rightly claims epoch 2.)
            won = await asyncio.gather(*(s.claim({"replica": i}, after=0)
                                         for i, s in enumerate(stores)))
            assert sorted(won) == [False, False, True]
            winner = stores[won.index(True)]
            for s in stores:
                await s.catch_up()
                assert s.view.epoch == 1 and s.view.holder == winner.view.holder
        finally:
            for s in stores:
                s.close()
    run(body)


def test_checkpoints_are_read_only_with_their_check_bytes(cluster: LocalCluster) -> None:
    name = fresh()
    blob = random.Random(7).randbytes(2_500_000)  # three parts

    async def body() -> None:
        s = RaftLogStore(cluster.address, name)
        try:
            assert await s.claim({"replica": 0})
            assert await s.write_checkpoint(4, [blob[:1000], blob[1000:]])
            end = s.view.checkpoints[4]
            assert len(end.parts) == 3
            assert await s.read_checkpoint(end) == blob
            # The newest of a number counts (a first start tried again writes its own).
            assert await s.write_checkpoint(4, [b"a later one of the same number"])
            assert await s.read_checkpoint(s.view.checkpoints[4]) == (
                b"a later one of the same number")
            # An end entry whose check bytes do not match what the parts hold.
            raw = RaftClient(cluster.urls, SECRET)
            try:
                await raw.request_update(encode_checkpoint_end(
                    name, 1, 5, 3, end.size, end.check ^ 1))
            finally:
                raw.close()
            await s.catch_up()
            assert 5 not in s.view.checkpoints  # no parts of its own: not a checkpoint
            forged = type(end)(end.index, 5, end.parts, end.size, end.check ^ 1)
            with pytest.raises(LogCorruptionError, match="check bytes do not match"):
                await s.read_checkpoint(forged)
            await s.register({"instance_name": name, "ic_port": 1})
            assert await s.registration() == {"instance_name": name, "ic_port": 1}
        finally:
            s.close()
    run(body)


def test_view_rules_without_a_cluster() -> None:
    from ambrosia_ic.logstore.raft_entries import encode_claim, encode_heartbeat, encode_records
    view = InstanceView("i")
    rid = b"r" * 12
    assert view.apply(1, rid, b"not the store's") == []
    assert view.apply(2, rid, encode_claim("other", 1, {})) == []
    assert view.apply(3, rid, encode_claim("i", 2, {})) == [Fenced(3, 2, "E")]  # a jump
    assert view.apply(4, rid, encode_claim("i", 1, {"r": 1})) == [
        EpochClaimed(4, 1, {"r": 1}, rid)]
    assert view.apply(4, rid, encode_records("i", 1, [b"dup"])) == []  # read twice
    assert view.apply(5, rid, encode_records("i", 1, [b"x", b""])) == [
        Records(5, 1, (b"x", b""))]
    with pytest.raises(LogCorruptionError, match="epoch 2, never claimed"):
        view.apply(6, rid, encode_heartbeat("i", 2))
    with pytest.raises(LogCorruptionError, match="cut short in a record"):
        view.apply(7, rid, encode_records("i", 1, [b"abc"])[:-1])
    with pytest.raises(LogCorruptionError, match="unknown log store entry kind"):
        view.apply(8, rid, encode_heartbeat("i", 1).replace(b"AM\x01H", b"AM\x01Z"))


# ---------------------------------------------------------------------- processes
class Replica:
    def __init__(self, c: LocalCluster, name: str, number: int, total: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(ROOT / "ic-harness"), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.raft.replica_worker", c.address, name,
             str(number), str(total)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        self.lines: list[str] = []

    def wait_line(self, prefix: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no {prefix!r} line; output: {''.join(self.lines)}")

    def finish(self, timeout: float = 60.0) -> int:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines.append(out)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def wait_records(c: LocalCluster, name: str, at_least: int) -> None:
    wait_until(lambda: len(asyncio.run(committed(c, name))[0]) >= at_least,
               f"{at_least} records of {name}")


def exactly_once(c: LocalCluster, name: str, total: int) -> InstanceView:
    records, view = asyncio.run(committed(c, name))
    assert records == [b"req %d" % i for i in range(total)]
    return view


@pytest.mark.slow
def test_primary_killed_standby_goes_on(whole_cluster: LocalCluster) -> None:
    c, name, total = whole_cluster, fresh(), 1500
    a = Replica(c, name, 1, total)
    try:
        a.wait_line("primary 1 0")
        wait_records(c, name, random.randint(50, 600))
        a.kill()  # kill -9
        b = Replica(c, name, 2, total)
        assert b.wait_line("primary 2").split()[1] == "2"
        assert b.finish() == 0, "".join(b.lines)
    finally:
        a.kill()
    assert exactly_once(c, name, total).epoch == 2


@pytest.mark.slow
def test_paused_primary_is_fenced_and_a_raft_peer_dies(whole_cluster: LocalCluster) -> None:
    """SIGSTOP past the lease: the standby takes over (while a Raft peer is killed);
    the old primary wakes up, finds the claim before it writes anything, and stops."""
    c, name, total = whole_cluster, fresh(), 1500
    a = Replica(c, name, 1, total)
    b: Replica | None = None
    try:
        a.wait_line("primary 1 0")
        wait_records(c, name, 200)
        a.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        b = Replica(c, name, 2, total)
        b.wait_line("primary 2")
        assert time.monotonic() - t0 >= LEASE  # not before the lease ran out
        wait_records(c, name, 700)
        follower = next(p.id for p in c.peers if p.id != c.leader())
        c.kill_peer(follower)
        a.proc.send_signal(signal.SIGCONT)
        assert a.finish() == EXIT_FENCED, "".join(a.lines)
        restart_missing(c)
        c.kill_peer(c.leader())  # and then the leader (two of three still commit)
        assert b.finish() == 0, "".join(b.lines)
    finally:
        a.proc.send_signal(signal.SIGCONT)
        a.kill()
        if b is not None:
            b.kill()
    # Woken past its lease, it read the log before writing anything new: at most the one
    # entry it had handed to its socket when it was stopped (still in the process, on a
    # busy machine, until its I/O thread ran again) reaches the log after the claim, and
    # readers ignore it (a SIGSTOP lands there now and then under load). The look itself
    # is held to nothing at all, deterministically, in
    # test_a_primary_silent_past_half_its_lease_looks_before_writing_and_writes_nothing.
    assert exactly_once(c, name, total).fenced_count <= 1


def test_a_primary_that_resigns_lets_a_standby_claim_at_once(cluster: LocalCluster) -> None:
    name = fresh()

    async def body() -> None:
        a, b = RaftLogStore(cluster.address, name), RaftLogStore(cluster.address, name)
        try:
            assert await a.claim({"replica": 1})
            await a.append([b"a0"])
            await b.catch_up()
            assert b.silent_for() < LEASE
            await a.resign()
            with pytest.raises(LockLostError):
                await a.append([b"a1"])  # nothing after the resignation
            await b.catch_up()
            assert b.silent_for() > LEASE  # no lease left to wait out
            assert await b.claim({"replica": 2})
            await b.catch_up()
            assert b.silent_for() < LEASE  # the new epoch's holder has not resigned
            await b.append([b"b0"])
        finally:
            a.close()
            b.close()
        records, view = await committed(cluster, name)
        assert records == [b"a0", b"b0"] and view.epoch == 2 and not view.resigned
    run(body)
