"""One sink connection's worker end, and which connection holds the sink, with no
socket: the greeting and ending rules of ``sinkserver.SinkServer``, which only moves the
bytes and keeps the time (the deterministic simulator drives the same rules).

A connection counts once its HELLO is accepted (the right version and cookie): ``SinkEnd``
answers it with OK and from then on hands each frame to be answered (``sinkanswer``).
Anything else first, a protocol error, the peer's ERROR or its close ends the connection,
with the reason for the sink's log line and the bytes to send last (the ERROR frame the
protocol asks for, or nothing). ``SinkDoor`` says which accepted connection is served: the
newest, so that a coordinator that reconnected, or took over from a fenced one, is the only
writer and two writers never interleave their offsets.
"""

from __future__ import annotations

from typing import Generic, TypeVar, cast

import attrs

from ambrosia_core.wire import NEED_DATA, NeedData
from ambrosia_services.connectors import (
    ConnectionClosed,
    ConnectorConnection,
    ConnectorProtocolError,
    ErrorFrame,
    Event,
    Hello,
    Ok,
    Role,
)

__all__ = ["SINK_CREDITS", "Accepted", "Ended", "Frame", "SinkDoor", "SinkEnd", "Step"]

SINK_CREDITS = 500  # what Wallaroo's 2PC file sink granted; its peers ignore credits


@attrs.frozen
class Accepted:
    """The HELLO was accepted: send ``reply``; the connection now holds the sink."""

    reply: bytes


@attrs.frozen
class Frame:
    """A frame of the linked coordinator, to be answered."""

    event: Event


@attrs.frozen
class Ended:
    """The connection ends: send ``last`` (an ERROR frame, or nothing), then close it;
    ``reason`` is what the sink's log line says."""

    reason: str
    last: bytes = b""


Step = Accepted | Frame | Ended


class SinkEnd:
    """The worker end of one connection to a 2PC sink.

    Args:
        cookie: the cookie a HELLO must carry (b"" = none).
        max_frame_size: the largest frame accepted.
    """

    def __init__(self, cookie: bytes, max_frame_size: int) -> None:
        self._conn = ConnectorConnection(Role.WORKER, cookie=cookie, twopc=True,
                                         max_frame_size=max_frame_size)
        self.accepted = False
        self.ended: Ended | None = None

    @property
    def partial_frame(self) -> bool:
        """Whether a frame was begun and not finished (its rest must come in time)."""
        return self._conn.partial_frame

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer (b"": it closed its end)."""
        self._conn.receive_data(data)

    def next_step(self) -> Step | NeedData:
        """What the bytes received so far call for next (``NEED_DATA``: nothing yet)."""
        if self.ended is not None:
            return self.ended
        try:
            event = self._conn.next_event()
        except ConnectorProtocolError as e:
            return self._end(f"protocol error: {e.reason}", self._conn.take_error_frame())
        if event is NEED_DATA:
            return NEED_DATA
        if isinstance(event, ConnectionClosed):
            return self._end("closed by the peer" if self.accepted
                             else "closed by the peer before its HELLO")
        if not self.accepted:
            if isinstance(event, Hello):
                self.accepted = True
                return Accepted(self._conn.send(Ok(SINK_CREDITS)))
            return self._end(f"{type(event).__name__} before HELLO")
        if isinstance(event, ErrorFrame):
            return self._end(f"the peer sent ERROR: {event.reason}")
        return Frame(cast(Event, event))

    def send(self, replies: list[Event]) -> bytes:
        """The bytes of the answers to a frame."""
        return b"".join(self._conn.send(reply) for reply in replies)

    def refused(self, why: Exception) -> Ended:
        """The sink refuses a frame (``SinkRefusedError``, ``SinkStateError``): ERROR
        with the reason, and the end of the connection."""
        return self._end(f"refused: {why}", self._conn.send(ErrorFrame(str(why))))

    def _end(self, reason: str, last: bytes = b"") -> Ended:
        self.ended = Ended(reason, last)
        return self.ended


C = TypeVar("C")


class SinkDoor(Generic[C]):
    """Which accepted connection the sink serves: the newest."""

    def __init__(self) -> None:
        self.served: C | None = None

    def admit(self, conn: C) -> C | None:
        """``conn``'s HELLO was accepted: it is served now. Returns the one it replaces
        (to be closed, its request in progress dropped), if any."""
        old, self.served = self.served, conn
        return old if old is not conn else None

    def left(self, conn: C) -> None:
        """``conn`` ended."""
        if self.served is conn:
            self.served = None
