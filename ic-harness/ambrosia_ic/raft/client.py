"""A client of a ØMQ RAFT cluster over pyzmq (asyncio): the thin transport around
``frames`` (the messages) and ``answers`` (what each answer means).

It keeps one DEALER socket per peer it talks to (so a request can go to one chosen
peer), learns the peers and the leader with RequestConfig, and sends every request to
the leader. The "broken known leader state" recovery follows the protocol document:

- a refusal that names the leader: send the request again to that leader;
- no answer within ``response_ttl`` (0.5 s), or a refusal that names nobody: forget
  the leader, wait ``election_grace`` (0.3 s), and send the request to each known peer
  in turn until one accepts it or names the leader.

A peer that did not answer loses its socket (and the requests queued on it), so a peer
that comes back later does not get a burst of stale requests. Updates are idempotent by
their request id, so sending one again after a lost answer is safe: the cluster answers
the index it committed the first time.

One request is in flight per client at a time (a lock orders them); a coordinator uses
one client to append and another to follow the log.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

try:  # pyzmq comes with the optional ``raft`` extra: only a raft:// store needs it
    import zmq
    import zmq.asyncio
    _NO_ZMQ: str | None = None
except ModuleNotFoundError as err:
    _NO_ZMQ = str(err)

from ambrosia_core.errors import EncodeError

from . import frames as fr
from .answers import WAIT, EntriesCursor, Redirect, config_outcome, update_outcome
from .errors import RaftError, RaftProtocolError, RaftUnavailableError, StreamLostError

__all__ = ["ELECTION_GRACE", "RESPONSE_TTL", "RaftClient", "Subscription"]

RESPONSE_TTL = 0.5
# A stream's next answer may wait behind the peer's disk: a few response times.
STREAM_TTL_FACTOR = 4
ELECTION_GRACE = 0.3
T = TypeVar("T")


class RaftClient:
    """A client of one cluster.

    Args:
        seeds: ROUTER urls of some peers (``tcp://127.0.0.1:PORT``).
        secret: the cluster's secret ("cluster ident"); a peer ignores requests
            that carry another.
        timeout: how long one call may try before ``RaftUnavailableError``.
    """

    def __init__(self, seeds: Sequence[str], secret: str | bytes = b"", *,
                 timeout: float = 10.0, response_ttl: float = RESPONSE_TTL,
                 election_grace: float = ELECTION_GRACE,
                 context: zmq.asyncio.Context | None = None) -> None:
        if not seeds:
            raise EncodeError("a RAFT client needs at least one peer url")
        _require_zmq()
        self.secret = secret.encode() if isinstance(secret, str) else bytes(secret)
        self.seeds = tuple(seeds)
        self.timeout = timeout
        self.response_ttl = response_ttl
        self.election_grace = election_grace
        self._own_context = context is None
        self.context = context if context is not None else zmq.asyncio.Context()
        self.peers: dict[str, str] = {}  # peer id -> url, once a peer told us
        self.leader_id: str | None = None
        self.leader_url: str | None = None
        self.request_ids = fr.RequestIds()
        self._sockets: dict[str, zmq.asyncio.Socket] = {}
        self._next_id = secrets.randbits(32)
        self._lock = asyncio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ sockets
    def _socket(self, url: str) -> zmq.asyncio.Socket:
        sock = self._sockets.get(url)
        if sock is None:
            sock = self.context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(url)
            self._sockets[url] = sock
        return sock

    def _drop(self, url: str) -> None:
        sock = self._sockets.pop(url, None)
        if sock is not None:
            sock.close(linger=0)

    def close(self) -> None:
        """Close every socket (and the context, if this client made it)."""
        self._closed = True
        for url in list(self._sockets):
            self._drop(url)
        if self._own_context:
            self.context.term()

    def _rid32(self) -> bytes:
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        return fr.encode_uint32(self._next_id)

    def _all_urls(self) -> list[str]:
        urls = list(dict.fromkeys([*self.peers.values(), *self.seeds]))
        return urls

    def _set_leader(self, leader_id: str | None, url: str | None = None) -> None:
        self.leader_id = leader_id
        self.leader_url = url if url is not None else self.peers.get(leader_id or "")
        if self.leader_url is not None:
            for other in [u for u in self._sockets if u != self.leader_url]:
                self._drop(other)  # only the leader's connection stays

    async def _receive(self, sock: zmq.asyncio.Socket, rid: bytes, ttl: float
                       ) -> list[bytes] | None:
        """The next answer to request ``rid`` (other answers are stale: dropped)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ttl
        while True:
            left = deadline - loop.time()
            if left <= 0 or not await sock.poll(int(left * 1000) + 1):
                return None
            msg = await sock.recv_multipart()
            if msg and msg[0] == rid:
                return msg[1:]

    # ------------------------------------------------------------------ the core
    async def _call(self, message: list[bytes], handle: Callable[[list[bytes]], Any]) -> Any:
        """Send ``message`` to the leader until ``handle`` gives a final answer.

        ``handle`` returns ``WAIT`` (accepted; keep waiting), a ``Redirect`` (refused),
        or the final value (wrapped as ``(True, value)``).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        rid = message[0]
        turn = 0  # which peer is next while no leader is known
        while True:
            if loop.time() > deadline:
                raise RaftUnavailableError(
                    f"no leader of the cluster at {', '.join(self._all_urls())} answered "
                    f"within {self.timeout:g} s")
            url = self.leader_url
            if url is None:
                urls = self._all_urls()
                url = urls[turn % len(urls)]
                turn += 1
            sock = self._socket(url)
            await sock.send_multipart(message)
            answer: Any = None
            while True:
                reply = await self._receive(sock, rid, self.response_ttl)
                if reply is None:
                    break
                answer = handle(reply)
                if answer is WAIT:
                    continue
                break
            if isinstance(answer, tuple):
                if self.leader_url != url:
                    self.leader_url = url
                    self._set_leader(next((i for i, u in self.peers.items() if u == url),
                                          None), url)
                return answer[1]
            if isinstance(answer, Redirect) and answer.leader_id is not None:
                if answer.leader_id not in self.peers:
                    await self._learn_peers(url)
                if self.peers.get(answer.leader_id, url) != url:  # not the one just asked
                    self._set_leader(answer.leader_id)
                    continue
            # Broken known leader state without a named leader: ask everyone in turn.
            if reply is None:
                self._drop(url)
            if self.leader_url is not None or turn % max(1, len(self._all_urls())) == 0:
                await asyncio.sleep(self.election_grace)
            self.leader_id = self.leader_url = None

    async def _learn_peers(self, url: str) -> None:
        sock = self._socket(url)
        rid = self._rid32()
        await sock.send_multipart([rid, fr.REQUEST_CONFIG, self.secret])
        reply = await self._receive(sock, rid, self.response_ttl)
        if reply is not None:
            self._note_config(fr.parse_config(reply))

    def _note_config(self, cfg: fr.ConfigReply) -> None:
        if cfg.peers:
            self.peers = dict(cfg.peers)

    # ------------------------------------------------------------------ RPCs
    async def request_config(self) -> fr.ConfigReply:
        """The cluster's peers and leader, from the leader (waits out an election)."""
        async with self._lock:
            def handle(reply: list[bytes]) -> Any:
                cfg = fr.parse_config(reply)
                self._note_config(cfg)
                if cfg.is_leader:
                    return (True, cfg)
                return Redirect(cfg.leader_id)
            cfg: fr.ConfigReply = await self._call(
                [self._rid32(), fr.REQUEST_CONFIG, self.secret], handle)
            return cfg

    async def request_update(self, data: bytes, reqid: bytes | None = None) -> int:
        """Append ``data`` as one log entry; returns its index once committed.

        Sending the same ``reqid`` again is safe: the entry is written once and the
        answer is its index.

        Raises:
            RequestExpiredError: ``reqid`` is older than the cluster's request id TTL.
            RaftUnavailableError: no leader committed it within ``timeout``.
        """
        rid = self.request_ids.new() if reqid is None else reqid
        if len(rid) != fr.REQID_SIZE:
            raise EncodeError(f"a request id is {fr.REQID_SIZE} bytes, got {len(rid)}")
        async with self._lock:
            index: int = await self._call([rid, fr.REQUEST_UPDATE, self.secret, bytes(data)],
                                          update_outcome)
            return index

    async def config_update(self, peers: Sequence[tuple[str, str]],
                            reqid: bytes | None = None) -> int:
        """Change the cluster's peers to ``peers`` ([(id, url), ...]); returns the index
        of the committed configuration entry.

        Raises:
            ConfigUpdateError: the cluster refused the argument, or is still busy with
                an earlier change.
            RequestExpiredError: ``reqid`` is too old.
        """
        rid = self.request_ids.new() if reqid is None else reqid
        body = fr.encode_json([list(p) for p in peers])
        async with self._lock:
            index: int = await self._call([rid, fr.CONFIG_UPDATE, self.secret, body],
                                          config_outcome)
        self.peers = dict(peers)
        return index

    async def request_log_info(self, url: str | None = None) -> fr.LogInfo:
        """One peer's log state (``url``; the leader by default): always answered."""
        async with self._lock:
            if url is None:
                def handle(reply: list[bytes]) -> Any:
                    info = fr.parse_log_info(reply)
                    return (True, info) if info.is_leader else Redirect(info.leader_id)
                found: fr.LogInfo = await self._call(
                    [self._rid32(), fr.REQUEST_LOG_INFO, self.secret], handle)
                return found
            sock = self._socket(url)
            rid = self._rid32()
            await sock.send_multipart([rid, fr.REQUEST_LOG_INFO, self.secret])
            reply = await self._receive(sock, rid, self.timeout)
            if reply is None:
                raise RaftUnavailableError(f"peer {url} did not answer RequestLogInfo")
            return fr.parse_log_info(reply)

    async def broadcast_url(self) -> str:
        """The leader's StateBroadcast PUB url.

        A follower of zmq-raft 0.5 answers with its own PUB url, where nothing is
        published: so the leader is found first (RequestConfig), and asked alone.
        """
        for _ in range(3):
            cfg = await self.request_config()
            url = self.peers.get(cfg.leader_id or "")
            if url is None:
                raise RaftProtocolError("RequestConfig: the leader is not among the peers")
            async with self._lock:
                sock = self._socket(url)
                rid = self._rid32()
                await sock.send_multipart([rid, fr.REQUEST_BROADCAST_STATE_URL, self.secret])
                reply = await self._receive(sock, rid, self.response_ttl)
            found = fr.parse_broadcast_url(reply) if reply is not None else None
            if found is not None:
                return found
            self._drop(url)
            self.leader_id = self.leader_url = None  # lost its leadership meanwhile
            await asyncio.sleep(self.election_grace)
        raise RaftUnavailableError("no leader told its StateBroadcast url")

    async def entries(self, prev_index: int, count: int | None = None
                      ) -> AsyncIterator[fr.EntriesReply]:
        """Stream the log after ``prev_index`` (up to the commit index, or ``count``
        entries): each yielded reply holds entries (with their indexes) or a snapshot
        chunk. Stopping the iteration early tells the peer to stop (count 0).

        Raises:
            RaftProtocolError: entries or chunks came out of order.
        """
        async with self._lock:
            rid = self._rid32()
            msg = [rid, fr.REQUEST_ENTRIES, self.secret, fr.encode_uint(prev_index)]
            if count is not None:
                msg.append(fr.encode_nuint(count))
            cursor = EntriesCursor(prev_index, count)

            def handle(reply: list[bytes]) -> Any:
                got = fr.parse_entries(reply)
                if got.status is fr.EntriesStatus.NOT_LEADER:
                    return Redirect(got.leader_id)
                return (True, got)

            first: fr.EntriesReply = await self._call(msg, handle)
            got = first
            sock = self._socket(self.leader_url or "")
            finished = False
            try:
                while True:
                    cursor.check(got)
                    yield got
                    if got.status is fr.EntriesStatus.LAST:
                        finished = True
                        return
                    follow = cursor.follow_up(rid, self.secret, got)
                    if follow is None:
                        finished = True
                        return
                    await sock.send_multipart(follow)
                    reply = await self._receive(sock, rid, STREAM_TTL_FACTOR * self.response_ttl)
                    if reply is None:
                        self._drop(self.leader_url or "")
                        self.leader_id = self.leader_url = None
                        raise StreamLostError("the leader stopped streaming entries")
                    got = fr.parse_entries(reply)
                    if got.status is fr.EntriesStatus.NOT_LEADER:
                        self.leader_id = self.leader_url = None
                        raise StreamLostError("the leader lost its leadership while "
                                              "streaming entries")
            finally:
                if not finished and not self._closed and self.leader_url is not None:
                    # Stopped early: tell the peer, so it frees the stream's pipeline.
                    await sock.send_multipart(cursor.stop(rid, self.secret))

    async def read(self, prev_index: int, count: int | None = None) -> list[fr.LogEntry]:
        """The committed entries after ``prev_index`` (snapshot chunks are skipped)."""
        out: list[fr.LogEntry] = []
        async for got in self.entries(prev_index, count):
            out.extend(got.entries)
        return out

    async def subscribe(self) -> Subscription:
        """A StateBroadcast subscription at the leader's PUB url."""
        url = await self.broadcast_url()
        return Subscription(self.context, url, self.secret)


def _require_zmq() -> None:
    if _NO_ZMQ is not None:
        raise RaftError(f"a ØMQ RAFT cluster is reached through pyzmq, which is not installed "
                        f"({_NO_ZMQ}): pip install 'ambrosia-py[raft]'")


class Subscription:
    """StateBroadcast messages of one leader's PUB socket."""

    def __init__(self, context: zmq.asyncio.Context, url: str, secret: bytes) -> None:
        self.url = url
        self.secret = secret
        self._sock = context.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SUBSCRIBE, secret)
        self._sock.connect(url)

    async def receive(self, timeout: float) -> fr.StateBroadcast | None:
        """The next broadcast, or None after ``timeout`` seconds without one (the leader
        sends one at least every 0.5 s: None means it is gone)."""
        if not await self._sock.poll(int(timeout * 1000) + 1):
            return None
        return fr.parse_broadcast(await self._sock.recv_multipart(), self.secret)

    def close(self) -> None:
        self._sock.close(linger=0)
