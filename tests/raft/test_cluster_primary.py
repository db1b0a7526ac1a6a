"""A caller follows a Raft-backed callee's claims from a claim known to be valid, not
from the start of a long cluster log: it reads only the entries after that claim, still
moves to a newer claim, remembers each claim it read, and a mark that names no claim of
the log sends it back to the start (where it still finds the primary)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from ambrosia_ic import registry
from ambrosia_ic.coordinator.cluster_primary import ClaimMark, ClusterPrimary, known_claim
from ambrosia_ic.lease import EPOCH_PREFIX
from ambrosia_ic.logstore.raft_store import RaftLogStore
from ambrosia_ic.raft.client import RaftClient
from ambrosia_ic.raft.cluster import LocalCluster

from tests.launcher import until

from .conftest import SECRET

pytestmark = pytest.mark.integration

HISTORY = 300  # entries of other users of the cluster, before and after the claim


async def _history(c: LocalCluster, n: int) -> int:
    """``n`` entries that are no instance's; returns the index of the last."""
    client = RaftClient([p.url for p in c.peers], SECRET)
    try:
        index = 0
        for i in range(n):
            index = await client.request_update(b"someone else's entry %d" % i)
        return index
    finally:
        client.close()


def test_a_caller_reads_from_the_claim_not_the_history(cluster: LocalCluster) -> None:
    key = f"callee-{uuid.uuid4().hex[:8]}"
    logs: list[str] = []

    async def body() -> None:
        await _history(cluster, HISTORY // 2)
        primary = RaftLogStore(cluster.address, key)
        standby = RaftLogStore(cluster.address, key)
        try:
            assert await primary.claim({"replica": 0, "ic_port": 1111})
            mark = ClaimMark(primary.view.claim_index, 1)
            await _history(cluster, HISTORY // 2)
            last = await _history(cluster, 1)
            seen: list[ClaimMark] = []
            caller = ClusterPrimary(cluster.address, key, logs.append, start=mark,
                                    remember=seen.append)
            everything = ClusterPrimary(cluster.address, key, logs.append)
            tasks = [asyncio.create_task(p.follow()) for p in (caller, everything)]
            try:
                await until(lambda: caller.where and everything.where, "both followers")
                assert caller.where == everything.where == ("127.0.0.1", 1111)
                # Only the claim and what came after it: the history before was skipped.
                assert caller.entries_read == last - mark.index + 1
                assert everything.entries_read >= last >= HISTORY
                assert seen == [mark]
                # A newer claim still moves the caller.
                assert await standby.claim({"replica": 2, "ic_port": 2222})
                await until(lambda: caller.where == ("127.0.0.1", 2222), "the newer claim")
                assert seen == [mark, ClaimMark(standby.view.claim_index, 2)]
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            # A mark that is no claim of this log: read from the start, still found.
            lost = ClusterPrimary(cluster.address, key, logs.append,
                                  start=ClaimMark(mark.index + 1, 1))
            task = asyncio.create_task(lost.follow())
            try:
                await until(lambda: lost.where == ("127.0.0.1", 2222), "the primary")
                assert lost.entries_read > last
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert any(f"log index {mark.index + 1} holds no claim" in ln for ln in logs)
        finally:
            primary.close()
            standby.close()

    asyncio.run(body())


def test_the_newest_claim_known_here(tmp_path: Path) -> None:
    home = tmp_path / "home"
    reg = registry.register(instance_name="callee", receive_port=41001, send_port=41002,
                            ic_port=41003, log_dir=tmp_path / "logs", active_active=True,
                            log_store="raft://127.0.0.1:41000?secret=s", home=home)
    key = "callee.0000abcd"
    assert known_claim(home, reg, key) is None
    # What a caller here remembered (for this cluster, whatever its secret).
    registry.remember_claim(home, "raft://127.0.0.1:41000", key, 40, 2)
    assert known_claim(home, reg, key) == ClaimMark(40, 2)
    # The claimant's epoch file here: a newer epoch wins, another log's does not count.
    d = registry.instance_dir(reg)
    d.mkdir(parents=True)
    (d / f"{EPOCH_PREFIX}3").write_text(json.dumps(
        {"replica": 1, "epoch": 3, "log_key": key, "claim_index": 90}))
    assert known_claim(home, reg, key) == ClaimMark(90, 3)
    (d / f"{EPOCH_PREFIX}4").write_text(json.dumps(
        {"replica": 1, "epoch": 4, "log_key": "callee.ffff0000", "claim_index": 120}))
    assert known_claim(home, reg, key) == ClaimMark(40, 2)
    # Another cluster's note is no hint for this one.
    registry.remember_claim(home, "raft://127.0.0.1:49999", key, 70, 5)
    assert known_claim(home, reg, key) is None
