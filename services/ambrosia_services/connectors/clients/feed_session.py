"""One session of a feed: the worker's OK, a NOTIFY per stream and its answer, MESSAGEs
while credits last, the ACKs that move each stream's point of reference, and how the
session ends (an ERROR, a RESTART, a lost connection). A part of ``feed.Feed``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AddressError
from ambrosia_core.retry import Attempts
from ambrosia_services.connectors import (
    POINT_OF_REFERENCE_FROM_START,
    SOURCE_VERSION,
    Ack,
    ConnectionClosed,
    ConnectionState,
    ConnectorConnection,
    ConnectorProtocolError,
    EosMessage,
    ErrorFrame,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Restart,
    Role,
)

from .sources import RecordSource

__all__ = ["FeedSession", "FeedStream", "SessionEndError", "StreamPhase"]

log = logging.getLogger("ambrosia_services.connectors.clients.feed")
_BATCH = 256  # records sent on one stream before the others get a turn


class StreamPhase(enum.Enum):
    IDLE = "needs a NOTIFY"
    NOTIFYING = "NOTIFY sent"
    REFUSED = "NOTIFY refused; retried later"
    OPEN = "open"
    EOS_SENT = "EOS sent; waiting for the covering ACK"
    DONE = "done"


class FeedStream:
    """One stream of a feed; ``refused`` spaces its NOTIFYs while another connection
    holds it (the feed's retry, its own count of refusals)."""

    def __init__(self, source: RecordSource, refused: Attempts) -> None:
        self.source = source
        self.phase = StreamPhase.IDLE
        self.acked: int | None = None  # the last point of reference the worker reported
        self.refused = refused
        self.retry_at = 0.0

    @property
    def covered(self) -> bool:
        last = self.source.last_id
        return last is None or (self.acked is not None and self.acked >= last)


class SessionEndError(Exception):
    """A session is over; ``restart_to`` is the RESTART's address, if it gave one;
    ``unanswered``: the worker closed before it sent a byte."""

    def __init__(self, reason: str, *, restart_to: Address | None = None,
                 unanswered: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.restart_to = restart_to
        self.unanswered = unanswered


class FeedSession:
    """A feed's session (a part of ``Feed``)."""

    streams: dict[int, FeedStream]
    cookie: bytes
    instance_name: str
    poll_interval: float
    max_frame_size: int
    sessions: int
    _wake: asyncio.Event
    _opened: int

    @property
    def done(self) -> bool:
        raise NotImplementedError  # the feed's

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ConnectorConnection(
            Role.CONNECTOR, cookie=self.cookie, max_frame_size=self.max_frame_size
        )
        hello = Hello(SOURCE_VERSION, self.cookie, "ambrosia-feed", self.instance_name)
        writer.write(conn.send(hello))
        reading = asyncio.ensure_future(self._read(conn, reader, writer))
        try:
            while not self.done:
                if reading.done():
                    reading.result()  # raises the session's SessionEndError
                sent = self._send_some(conn, writer)
                await writer.drain()
                if sent:
                    await asyncio.sleep(0)  # let the reader take ACKs between batches
                    continue
                self._wake.clear()
                waiter = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait([reading, waiter], timeout=self.poll_interval,
                                   return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
        except (OSError, ConnectionError) as e:
            raise SessionEndError(f"connection lost ({e.__class__.__name__})") from None
        finally:
            if not reading.done():
                reading.cancel()
            elif not reading.cancelled():
                reading.exception()  # retrieved, so asyncio does not log it as lost

    async def _read(
        self, conn: ConnectorConnection, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Handle what the worker sends; ends by raising ``SessionEndError``."""
        answered = False
        while True:
            try:
                data = await reader.read(1 << 16)
            except (OSError, ConnectionError) as e:
                raise SessionEndError(f"connection lost ({e.__class__.__name__})",
                                       unanswered=not answered) from None
            if not data and not answered:
                raise SessionEndError("closed by the worker before it answered HELLO",
                                       unanswered=True)
            answered = True
            conn.receive_data(data)
            try:
                for event in conn.events():
                    self._handle(event)
            except ConnectorProtocolError as e:
                writer.write(conn.take_error_frame())
                raise SessionEndError(f"protocol error: {e.reason}") from None
            self._wake.set()

    def _handle(self, event: object) -> None:
        match event:
            case Ok():
                self.sessions += 1
            case NotifyAck(success, stream_id, por):
                stream = self.streams[stream_id]
                if success:
                    start = None if por == POINT_OF_REFERENCE_FROM_START else por
                    stream.source.resume(start)
                    if start is not None:
                        stream.acked = start
                    stream.phase = StreamPhase.OPEN
                    stream.refused.progress()
                    self._opened += 1
                else:
                    stream.retry_at = time.monotonic() + stream.refused.next_wait()
                    stream.phase = StreamPhase.REFUSED
                    log.info("stream %r is held elsewhere; NOTIFY again later", stream.source.name)
            case Ack(_, acks):
                for stream_id, por in acks:
                    acked = self.streams.get(stream_id)
                    if acked is None:
                        continue  # not ours: nothing to drop or finish
                    acked.acked = por if acked.acked is None else max(acked.acked, por)
                    acked.source.acked(por)
                    if acked.phase is StreamPhase.EOS_SENT and acked.covered:
                        acked.phase = StreamPhase.DONE
            case Restart(address):
                try:
                    to = Address.parse(address, what="") if address else None
                except AddressError as e:
                    raise SessionEndError(f"RESTART to an unusable address: {e}") from None
                raise SessionEndError(f"RESTART{' to ' + address if address else ''}",
                                       restart_to=to)
            case ErrorFrame(reason):
                raise SessionEndError(f"the worker sent ERROR: {reason}")
            case ConnectionClosed():
                raise SessionEndError("closed by the worker")

    def _send_some(self, conn: ConnectorConnection, writer: asyncio.StreamWriter) -> int:
        """Send what credits allow now; the number of frames sent."""
        # A lost connection ends the session through the reader; writes meanwhile would
        # only make asyncio log a warning for each.
        if conn.state is not ConnectionState.STREAMING or writer.is_closing():
            return 0
        sent = 0
        now = time.monotonic()
        for stream in self.streams.values():
            src = stream.source
            if stream.phase is StreamPhase.REFUSED and now >= stream.retry_at:
                stream.phase = StreamPhase.IDLE
            if stream.phase is StreamPhase.IDLE and conn.credits > 0:
                por = 0 if stream.acked is None else stream.acked
                writer.write(conn.send(Notify(src.stream_id, src.name, por)))
                stream.phase = StreamPhase.NOTIFYING
                sent += 1
            batch = 0
            while (stream.phase is StreamPhase.OPEN and conn.credits > 0 and batch < _BATCH
                   and not writer.is_closing()):
                record = src.next_record()
                if record is not None:
                    message = Message(src.stream_id, record.message_id, record.payload,
                                      key=record.key)
                    writer.write(conn.send(message))
                    batch += 1
                    continue
                if src.finished:
                    writer.write(conn.send(EosMessage(src.stream_id)))
                    batch += 1
                    stream.phase = StreamPhase.DONE if stream.covered else StreamPhase.EOS_SENT
                break
            sent += batch
        return sent
