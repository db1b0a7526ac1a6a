"""Helpers shared by the connector protocol tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ambrosia_services.connectors import (
    SINK_VERSION,
    SOURCE_VERSION,
    ConnectorConnection,
    FrameReader,
    Hello,
    Notify,
    NotifyAck,
    Ok,
    RawFrame,
    Role,
)

from ambrosia_core.wire import NEED_DATA


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


def _feed_whole(conn: ConnectorConnection, data: bytes) -> list[object]:
    conn.receive_data(data)
    return list(conn.events())


class Pair:
    """A connector-role and a worker-role connection joined in memory, no network.

    ``c_send``/``w_send`` send one event from that side and return the events the other
    side then reads; ``wire`` records every byte in order, as (sender, bytes), and ``sent``
    every event, as (sender, event).
    """

    def __init__(
        self,
        *,
        twopc: bool = False,
        cookie: bytes = b"",
        feed: Callable[[ConnectorConnection, bytes], list[object]] | None = None,
    ) -> None:
        self.feed = feed or _feed_whole
        self.c = ConnectorConnection(Role.CONNECTOR, twopc=twopc, cookie=cookie)
        self.w = ConnectorConnection(Role.WORKER, twopc=twopc, cookie=cookie)
        self.version = SINK_VERSION if twopc else SOURCE_VERSION
        self.wire: list[tuple[str, bytes]] = []
        self.sent: list[tuple[str, object]] = []

    def c_send(self, event: object) -> list[object]:
        data = self.c.send(event)  # type: ignore[arg-type]
        self.wire.append(("c", data))
        self.sent.append(("c", event))
        return self.feed(self.w, data)

    def w_send(self, event: object) -> list[object]:
        data = self.w.send(event)  # type: ignore[arg-type]
        self.wire.append(("w", data))
        self.sent.append(("w", event))
        return self.feed(self.c, data)

    def handshake(self, credits: int = 100) -> None:
        hello = Hello(self.version, self.c.cookie, "prog", "inst")
        assert self.c_send(hello) == [hello]
        assert self.w_send(Ok(credits)) == [Ok(credits)]

    def open_stream(self, stream_id: int, por: int = 0) -> None:
        assert self.c_send(Notify(stream_id, f"s{stream_id}", por)) == [
            Notify(stream_id, f"s{stream_id}", por)
        ]
        assert self.w_send(NotifyAck(True, stream_id, por)) == [NotifyAck(True, stream_id, por)]
