"""Helpers shared by the connector protocol tests."""

from __future__ import annotations

from collections.abc import Iterable

from ambrosia_py.wire import NEED_DATA
from services.connectors import ConnectorConnection, FrameReader, RawFrame


def h(text: str) -> bytes:
    """Hex with any whitespace, as the vectors are written."""
    return bytes.fromhex(text)


def frames_of(reader: FrameReader, limit: int = 10_000) -> list[RawFrame]:
    """Every whole frame the reader holds now; fails on a hang."""
    out: list[RawFrame] = []
    for _ in range(limit):
        raw = reader.next_frame()
        if raw is NEED_DATA:
            return out
        assert isinstance(raw, RawFrame)
        out.append(raw)
    raise AssertionError(f"reader made more than {limit} frames without asking for data")


def feed_in_pieces(conn: ConnectorConnection, data: bytes, cuts: Iterable[int]) -> list[object]:
    """Feed ``data`` cut at ``cuts`` (sorted offsets), draining events after every piece."""
    events: list[object] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        if cut <= start or cut > len(data):
            continue
        conn.receive_data(data[start:cut])
        events.extend(conn.events())
        start = cut
    return events


def one_byte_at_a_time(conn: ConnectorConnection, data: bytes) -> list[object]:
    return feed_in_pieces(conn, data, range(1, len(data)))
