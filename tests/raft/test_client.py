"""The client against a real three-peer zmq-raft cluster: every RPC, idempotent updates,
expiry, streaming, the broadcast, and the leader killed in the middle of updates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from ambrosia_ic.raft import (
    ConfigUpdateError,
    RaftUnavailableError,
    RequestExpiredError,
)
from ambrosia_ic.raft.client import RaftClient
from ambrosia_ic.raft.cluster import LocalCluster
from ambrosia_ic.raft.frames import EntriesStatus, EntryType

from .conftest import SECRET

pytestmark = pytest.mark.integration
T = TypeVar("T")


def run(c: LocalCluster, body: Callable[[RaftClient], Awaitable[T]], **kw: object) -> T:
    async def main() -> T:
        client = RaftClient(c.urls, kw.pop("secret", SECRET), **kw)  # type: ignore[arg-type]
        try:
            return await body(client)
        finally:
            client.close()
    return asyncio.run(main())


def test_config_names_the_leader_and_peers(cluster: LocalCluster) -> None:
    async def body(cl: RaftClient) -> None:
        cfg = await cl.request_config()
        assert cfg.is_leader and cfg.leader_id in {"p1", "p2", "p3"}
        assert dict(cfg.peers) == {p.id: p.url for p in cluster.peers}
        info = await cl.request_log_info()
        assert info.is_leader and info.leader_id == cfg.leader_id
        assert info.commit_index <= info.last_index
        follower = next(p for p in cluster.peers if p.id != cfg.leader_id)
        other = await cl.request_log_info(follower.url)  # any peer answers
        assert not other.is_leader and other.leader_id == cfg.leader_id
    run(cluster, body)


def test_update_is_idempotent_by_request_id(cluster: LocalCluster) -> None:
    async def body(cl: RaftClient) -> None:
        rid = cl.request_ids.new()
        first = await cl.request_update(b"once", rid)
        again = await cl.request_update(b"once", rid)
        assert again == first
        entries = await cl.read(first - 1, 2)
        assert entries[0].data == b"once" and entries[0].reqid == rid
        assert entries[0].type is EntryType.STATE
        assert all(e.reqid != rid for e in entries[1:])
    run(cluster, body)


def test_expired_request_is_refused_and_never_applied(cluster: LocalCluster) -> None:
    async def body(cl: RaftClient) -> None:
        before = (await cl.request_log_info()).commit_index
        stale = cl.request_ids.new(at=time.time() - 9 * 3600)  # the TTL is 8 hours
        with pytest.raises(RequestExpiredError, match="expired"):
            await cl.request_update(b"too late", stale)
        fresh = await cl.request_update(b"in time")
        assert [e.data for e in await cl.read(before)] == [b"in time"]
        assert fresh == before + 1
    run(cluster, body)


def test_entries_stream_in_a_pipeline_and_stop_early(cluster: LocalCluster) -> None:
    async def body(cl: RaftClient) -> None:
        first = await cl.request_update(b"x" * 1000)
        for i in range(1, 300):
            await cl.request_update(b"%04d" % i + b"x" * 996)
        statuses = []
        seen = []
        async for got in cl.entries(first - 1):
            statuses.append(got.status)
            seen += [e.index for e in got.entries]
        assert seen[:300] == list(range(first, first + 300))
        assert EntriesStatus.MORE in statuses and statuses[-1] is EntriesStatus.LAST
        some = await cl.read(first - 1, 7)
        assert [e.index for e in some] == list(range(first, first + 7))
        async for got in cl.entries(first - 1):
            assert got.entries[0].index == first
            break  # tells the peer to stop (count 0)
        assert (await cl.request_log_info()).commit_index >= first + 299
    run(cluster, body)


def test_broadcast_carries_new_entries(cluster: LocalCluster) -> None:
    async def body(cl: RaftClient) -> None:
        sub = await cl.subscribe()
        try:
            # A SUB socket misses what comes before it joins: it has joined once the first
            # broadcast (the leader sends one at least every 0.5 s) reaches it.
            assert await sub.receive(30) is not None
            index = await cl.request_update(b"broadcast me")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = await sub.receive(30)
                assert got is not None
                if any(e.index == index for e in got.entries):
                    assert [e.data for e in got.entries if e.index == index] == [b"broadcast me"]
                    return
            raise AssertionError("the entry was never broadcast")
        finally:
            sub.close()
    run(cluster, body)


def test_wrong_secret_gets_no_answer(cluster: LocalCluster) -> None:
    async def body(cl: RaftClient) -> None:
        with pytest.raises(RaftUnavailableError, match="no leader"):
            await cl.request_config()
    run(cluster, body, secret="not-the-secret", timeout=1.5)


def test_config_update(whole_cluster: LocalCluster) -> None:
    """A fourth peer (never started) joins and leaves: three of four still commit."""
    c = whole_cluster

    async def body(cl: RaftClient) -> None:
        same = [(p.id, p.url) for p in c.peers]
        four = [*same, ("p4", "tcp://127.0.0.1:9")]
        assert await cl.config_update(four) > 0
        assert list((await cl.request_config()).peers) == four
        assert await cl.request_update(b"with four") > 0
        assert await cl.config_update(same) > 0
        assert list((await cl.request_config()).peers) == same
        with pytest.raises(ConfigUpdateError, match="no change in cluster membership"):
            await cl.config_update(same)
        clash = [*same[:2], ("p3", same[0][1])]
        with pytest.raises(ConfigUpdateError, match="refused the configuration"):
            await cl.config_update(clash)
    run(c, body)


@pytest.mark.slow
def test_leader_killed_in_the_middle_of_updates(whole_cluster: LocalCluster) -> None:
    """Updates go on through a new election; each one is in the log exactly once."""
    c = whole_cluster

    async def body(cl: RaftClient) -> None:
        start = (await cl.request_log_info()).commit_index
        leader = (await cl.request_config()).leader_id
        assert leader is not None
        indexes = []
        for i in range(120):
            task = asyncio.create_task(cl.request_update(b"k-%d" % i))
            if i == 40:
                await asyncio.sleep(0.001)  # the request is on its way
                c.kill_peer(leader)
            indexes.append(await task)
        assert (await cl.request_config()).leader_id != leader
        data = [e.data for e in await cl.read(start) if e.data.startswith(b"k-")]
        assert data == [b"k-%d" % i for i in range(120)]
        assert indexes == sorted(indexes)
    run(c, body)
