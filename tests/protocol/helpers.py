"""Building the coordinator's bytes and draining a binding connection, for the protocol tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ambrosia_core.wire import (
    NEED_DATA,
    Message,
    encode_checkpoint_record,
    encode_control_record,
    encode_record,
)
from ambrosia_py.protocol import BindingConnection, CheckpointLoadChunk

COMMITTER = 0x2A

# (is_primary, is_replaying) as the connection reports them after an event
LIVE = (False, False)  # first start, or owing the becoming-primary checkpoint
REPLAY = (False, True)
PRIMARY = (True, False)

Step = tuple[object, tuple[bool, bool]]


def h(text: str) -> bytes:
    """Hex with any whitespace, as golden bytes are written."""
    return bytes.fromhex(text)


def control(*messages: Message) -> bytes:
    """A control record (sequence id -1)."""
    if len(messages) == 1:
        return encode_control_record(COMMITTER, messages[0])
    return encode_record(COMMITTER, -1, b"".join(m.encode() for m in messages))


def data(seq: int, *messages: Message) -> bytes:
    """A data record with sequence id ``seq``."""
    return encode_record(COMMITTER, seq, b"".join(m.encode() for m in messages))


def checkpoint(blob: bytes) -> bytes:
    """A checkpoint record and the raw bytes that follow it."""
    return encode_checkpoint_record(COMMITTER, len(blob)) + blob


def flags(conn: BindingConnection) -> tuple[bool, bool]:
    return (conn.is_primary, conn.is_replaying)


def drain(conn: BindingConnection, limit: int = 10_000) -> list[Step]:
    """Every event available now, each with the flags read right after it was returned."""
    out: list[Step] = []
    for _ in range(limit):
        ev = conn.next_event()
        if ev is NEED_DATA:
            return out
        out.append((ev, flags(conn)))
    raise AssertionError(f"more than {limit} events without NEED_DATA (a loop?)")


def joined(steps: Iterable[Step]) -> list[Step]:
    """Adjacent checkpoint chunks joined: how raw bytes are cut depends on how they were fed."""
    out: list[Step] = []
    for ev, fl in steps:
        last = out[-1][0] if out else None
        if isinstance(ev, CheckpointLoadChunk) and isinstance(last, CheckpointLoadChunk):
            out[-1] = (CheckpointLoadChunk(last.data + ev.data), fl)
        else:
            out.append((ev, fl))
    return out


def feed(conn: BindingConnection, payload: bytes, piece: int = 0) -> list[Step]:
    """Feed ``payload`` whole (``piece`` 0) or ``piece`` bytes at a time, draining after
    every piece; returns the events with adjacent checkpoint chunks joined."""
    if not piece:
        conn.receive_data(payload)
        return joined(drain(conn))
    steps: list[Step] = []
    for i in range(0, len(payload), piece):
        conn.receive_data(payload[i : i + piece])
        steps.extend(drain(conn))
    return joined(steps)


def split_at(payload: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(payload)) for c in cuts} | {0, len(payload)})
    return [payload[a:b] for a, b in itertools.pairwise(points)]
