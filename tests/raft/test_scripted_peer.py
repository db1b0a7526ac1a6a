"""What the real cluster will not do on demand, from a scripted peer on a real ØMQ ROUTER
socket: a snapshot streamed in chunks (with the follow-ups the protocol asks for, byte for
byte), chunks out of order, and frames that break the protocol."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
import zmq
from ambrosia_ic.raft import RaftProtocolError
from ambrosia_ic.raft import frames as fr
from ambrosia_ic.raft.client import RaftClient

SECRET = b"k"
Script = Callable[[list[bytes]], list[list[bytes]]]


class ScriptedPeer:
    """A ROUTER on 127.0.0.1 answering each request with what ``script`` returns (and
    remembering every request)."""

    def __init__(self, script: Script) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.url = f"tcp://127.0.0.1:{port}"
        self.script = script
        self.requests: list[list[bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(20):
                continue
            ident, *msg = self.sock.recv_multipart()
            self.requests.append(msg)
            for reply in self.script(msg):
                self.sock.send_multipart([ident, *reply])

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        self.ctx.term()


def config(peer: ScriptedPeer, msg: list[bytes]) -> list[list[bytes]]:
    return [[msg[0], b"\x01", fr.encode_json("p1"), fr.encode_json([["p1", peer.url]])]]


def run_entries(script: Callable[[ScriptedPeer, list[bytes]], list[list[bytes]]]
                ) -> tuple[list[fr.EntriesReply], ScriptedPeer]:
    holder: list[ScriptedPeer] = []

    def dispatch(msg: list[bytes]) -> list[list[bytes]]:
        if msg[1] == fr.REQUEST_CONFIG:
            return config(holder[0], msg)
        return script(holder[0], msg)

    peer = ScriptedPeer(dispatch)
    holder.append(peer)

    async def body() -> list[fr.EntriesReply]:
        client = RaftClient([peer.url], SECRET, timeout=3.0)
        try:
            await client.request_config()
            return [got async for got in client.entries(0)]
        finally:
            client.close()
    try:
        return asyncio.run(body()), peer
    finally:
        peer.close()


def entry(data: bytes) -> bytes:
    return fr.encode_entry(b"r" * 12, fr.EntryType.STATE, 5, data)


def test_snapshot_chunks_then_entries() -> None:
    def script(peer: ScriptedPeer, msg: list[bytes]) -> list[list[bytes]]:
        rid, prev = msg[0], fr.decode_uint(msg[3])
        offset = fr.decode_uint(msg[5]) if len(msg) > 5 else 0
        if prev == 0 and offset == 0:
            return [[rid, b"\x03", fr.encode_json([0, 10, 5]), b"\x07", b"abcd"]]
        if prev == 0 and offset == 4:
            return [[rid, b"\x03", fr.encode_json([4, 10, 5]), b"\x07", b"efghij"]]
        assert prev == 7
        return [[rid, b"\x01", b"", b"\x08", entry(b"after")]]

    got, peer = run_entries(script)
    assert [g.status for g in got] == [fr.EntriesStatus.SNAPSHOT] * 2 + [fr.EntriesStatus.LAST]
    assert b"".join(g.chunk.data for g in got if g.chunk) == b"abcdefghij"
    assert got[-1].entries[0].index == 8 and got[-1].entries[0].data == b"after"
    rid = peer.requests[1][0]
    # The follow-ups: the same request id; the next chunk's offset while the snapshot
    # lasts (count null), then the snapshot's index as the previous index.
    assert peer.requests[1:] == [
        [rid, fr.REQUEST_ENTRIES, SECRET, b"\x00"],
        [rid, fr.REQUEST_ENTRIES, SECRET, b"\x00", b"", b"\x04"],
        [rid, fr.REQUEST_ENTRIES, SECRET, b"\x07"],
    ]


def test_chunks_out_of_order_are_refused() -> None:
    def script(peer: ScriptedPeer, msg: list[bytes]) -> list[list[bytes]]:
        return [[msg[0], b"\x03", fr.encode_json([4, 10, 5]), b"\x07", b"efghij"]]

    with pytest.raises(RaftProtocolError, match="snapshot chunk at 4 where 0 was due"):
        run_entries(script)


def test_entries_that_do_not_follow_are_refused() -> None:
    def script(peer: ScriptedPeer, msg: list[bytes]) -> list[list[bytes]]:
        return [[msg[0], b"\x01", b"", b"\x09", entry(b"x")]]  # index 9 after 0

    with pytest.raises(RaftProtocolError, match="entries up to 9 do not follow index 0"):
        run_entries(script)


def test_broken_frames_are_refused() -> None:
    def script(peer: ScriptedPeer, msg: list[bytes]) -> list[list[bytes]]:
        return [[msg[0], b"\x02", b"", b"\x01", b"short"]]  # an entry of 5 bytes

    with pytest.raises(RaftProtocolError, match="a log entry of 5 bytes"):
        run_entries(script)
