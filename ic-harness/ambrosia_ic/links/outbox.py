"""What a sender keeps for one destination, and what it writes when: the rule, without
I/O (``outbound.OutboundLink`` runs it on a connection; a coordinator's core owns one per
destination).

Replayable calls are numbered 1, 2, ... and kept until the receiver says it logged them
(its TrimTo, or the position its handshake names); calls a replay regenerates that the
receiver has already are dropped at once. While connected, ``to_send`` gives the records
of the calls not yet written on this connection and the Impulses waiting (no number: at
most once); after a reconnection everything after the receiver's position goes again,
and the receiver takes only what is new (``coordinator.intake``).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from ambrosia_core.wire import CONTROL_SEQ, encode_record

__all__ = ["MAX_RECORD_BODY", "LinkOutbox"]

MAX_RECORD_BODY = 1 << 20  # a record is cut once its calls reach this many bytes


class LinkOutbox:
    """The calls for one destination: numbered, kept until logged there, written once
    per connection."""

    def __init__(self, next_seq: int = 1,
                 unacked: Iterable[tuple[int, bytes]] | None = None) -> None:
        self.next_seq = next_seq
        self.unacked: collections.deque[tuple[int, bytes]] = collections.deque(unacked or ())
        self.acked = 0  # the highest number the receiver has said it logged
        self.impulses: collections.deque[bytes] = collections.deque()
        self.sent: int | None = None  # the last number written on this connection

    def add(self, rpc: bytes) -> int:
        """Queue a replayable call; returns its number."""
        seq = self.next_seq
        self.next_seq = seq + 1
        if seq > self.acked:  # a replayed call the receiver already has is dropped
            self.unacked.append((seq, rpc))
        return seq

    def add_run(self, rpcs: list[bytes]) -> bool:
        """``add`` each of ``rpcs``; returns whether any is kept."""
        seq = self.next_seq
        acked = self.acked
        append = self.unacked.append
        for rpc in rpcs:
            if seq > acked:
                append((seq, rpc))
            seq += 1
        self.next_seq = seq
        return seq - 1 > acked

    def add_impulse(self, rpc: bytes) -> None:
        self.impulses.append(rpc)

    def trim(self, upto: int) -> None:
        """The receiver logged everything up to ``upto``."""
        if upto > self.acked:
            self.acked = upto
        unacked = self.unacked
        while unacked and unacked[0][0] <= upto:
            unacked.popleft()

    def connected(self, position: int) -> None:
        """A connection is up; the receiver's handshake named ``position`` (what it
        logged): everything after it is to be written on this connection."""
        self.trim(position)
        self.sent = position

    def disconnected(self) -> None:
        self.sent = None

    def to_send(self) -> bytes:
        """The records to write now: the calls after the last one written on this
        connection, then the Impulses waiting (b"" when not connected)."""
        sent = self.sent
        if sent is None:
            return b""
        out: list[bytes] = []
        unacked = self.unacked
        if unacked and unacked[-1][0] > sent:
            out.append(self._records(sent))
            self.sent = unacked[-1][0]
        while self.impulses:
            out.append(encode_record(0, CONTROL_SEQ, self._take_impulses()))
        return b"".join(out)

    def snapshot(self) -> dict[str, object]:
        return {"next": self.next_seq, "unacked": [[s, b] for s, b in self.unacked]}

    def _records(self, sent: int) -> bytes:
        """The calls after ``sent``, as records of up to ``MAX_RECORD_BODY`` bytes."""
        unacked = self.unacked
        first = unacked[0][0]
        out: list[bytes] = []
        run: list[bytes] = []
        size = 0
        seq = sent
        for i in range(max(0, sent + 1 - first), len(unacked)):
            seq, rpc = unacked[i]
            run.append(rpc)
            size += len(rpc)
            if size >= MAX_RECORD_BODY:
                out.append(encode_record(0, seq, b"".join(run)))
                run.clear()
                size = 0
        if run:
            out.append(encode_record(0, seq, b"".join(run)))
        return b"".join(out)

    def _take_impulses(self) -> bytes:
        """Queued Impulses, up to about ``MAX_RECORD_BODY`` bytes of them."""
        run: list[bytes] = []
        size = 0
        while self.impulses and size < MAX_RECORD_BODY:
            rpc = self.impulses.popleft()
            run.append(rpc)
            size += len(rpc)
        return b"".join(run)
