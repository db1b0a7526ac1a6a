"""Feeding helpers shared by the wire tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ambrosia_core.wire import NEED_DATA, CheckpointChunk
from ambrosia_core.wire.stream import LogRecordDecoder, MessageStreamDecoder

Decoder = LogRecordDecoder | MessageStreamDecoder


def h(text: str) -> bytes:
    """Hex with any whitespace, as the vectors are written."""
    return bytes.fromhex(text)


def drain(decoder: Decoder, limit: int) -> list[object]:
    """Every event the decoder can make now; fails if it makes more than ``limit`` (a hang)."""
    out: list[object] = []
    for _ in range(limit):
        ev = decoder.next_event()
        if ev is NEED_DATA:
            return out
        out.append(ev)
    raise AssertionError(f"decoder produced more than {limit} events without asking for data")


def normalized(events: Iterable[object]) -> list[object]:
    """Adjacent checkpoint chunks joined: how raw bytes are cut depends on how they were fed."""
    out: list[object] = []
    for ev in events:
        if isinstance(ev, CheckpointChunk) and out and isinstance(out[-1], CheckpointChunk):
            out[-1] = CheckpointChunk(out[-1].data + ev.data)
        else:
            out.append(ev)
    return out


def feed(decoder: Decoder, pieces: Iterable[bytes], *, batched: bool = False) -> list[object]:
    """Feed ``pieces`` one after another, draining after each; returns normalized events.

    ``batched`` drains with ``decoder.drain()`` instead of ``next_event`` one at a time.
    """
    events: list[object] = []
    for piece in pieces:
        decoder.receive_data(piece)
        if batched:
            got = decoder.drain()
            assert len(got) <= 2 * len(piece) + 4
            assert decoder.next_event() is NEED_DATA
            events.extend(got)
        else:
            events.extend(drain(decoder, 2 * len(piece) + 4))
    return normalized(events)


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """``data`` cut at the given positions (clamped, sorted, duplicates allowed)."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]
