"""The sink side of the primary: one link per sink, a reconciler between what the state
wants (the transaction in flight, the decisions to deliver) and what the link has done.

A link connects out (exponential back-off, capped), says HELLO as Wallaroo's sink side
does, and on every connection: ListUncommitted, whose answer becomes a
``sink_uncommitted`` Impulse; once that is applied, the Phase2s it decided; NOTIFY of
stream 1, whose NOTIFY_ACK must carry the committed offset the state holds (a 2PC sink
cuts its output back to a Phase1's start on abort, so a Phase1 must never start anywhere
else); then, for each transaction the state cuts, its bytes as MESSAGEs whose ids are
byte offsets, Phase1, the vote as a ``sink_voted`` Impulse and, once that is applied,
Phase2 with the decision. The handlers wake the link whenever sink state changes.

After an abort the link reconnects at once: the aborted bytes go again from the same
offsets, which a connection (message ids rise per stream) only allows after a new NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

from ambrosia_core.loops import Backoff, said_at, write_unless_closing
from ambrosia_core.wire import NEED_DATA
from ambrosia_services.staging import Ref, StagingError, read_block

from .._state import Role
from ..connection import SINK_VERSION, ConnectorConnection
from ..errors import ConnectorProtocolError
from ..frames import Ack, ConnectionClosed, ErrorFrame, Hello, Message, Notify, NotifyAck, Ok
from ..twopc import ListUncommitted, Phase1, Phase2, ReplyUncommitted, TwoPCReply, Where
from .config import CoordinatorConfig, parse_address
from .core import CoordinatorCore, SinkRecord

__all__ = ["PROGRAM_NAME", "SINK_STREAM_ID", "SinkLink"]

PROGRAM_NAME = "ambrosia-py"
SINK_STREAM_ID = 1
CHUNK = 64 * 1024  # the most output bytes in one MESSAGE
_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0
_ABORTS_SAID = 3  # no votes in a row after which the back-off is said (once)
_READ = 64 * 1024


class SinkLinkError(Exception):
    """This connection to the sink cannot go on (the reason is one line)."""


class _ReconnectError(Exception):
    """End this connection and connect again at once (after an abort)."""


class SinkLink:
    """The link to one sink.

    Args:
        name: the sink's name (its key in ``sinks``, the name of its stream 1).
        core: the coordinator's state (read only).
        cfg: the configuration.
        instance: the instance name (sent in HELLO).
        send_uncommitted / send_voted: send the ``sink_uncommitted`` / ``sink_voted``
            Impulses.
    """

    def __init__(self, name: str, core: Callable[[], CoordinatorCore], cfg: CoordinatorConfig,
                 instance: str, send_uncommitted: Callable[[str, int, list[str]], None],
                 send_voted: Callable[[str, str, bool], None],
                 log: logging.LoggerAdapter[Any]) -> None:
        self.name = name
        self._core = core
        self.cfg = cfg
        self.instance = instance
        self.host, self.port = parse_address(cfg.sinks[name], f"sinks.{name}")
        self._send_uncommitted = send_uncommitted
        self._send_voted = send_voted
        self.log = log
        self._changed = asyncio.Event()
        self.connected = False
        self.sessions = 0
        self.aborts_in_a_row = 0  # transactions the sink voted no on since its last commit
        self._backoff = Backoff(_FIRST_DELAY, _MAX_DELAY)

    def wake(self) -> None:
        """The state changed: look again."""
        self._changed.set()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            self._changed.clear()
            await self._changed.wait()

    def _rec(self) -> SinkRecord | None:
        rec = self._core().sinks.get(self.name)
        return rec if rec is not None and rec.active else None

    async def run(self) -> None:
        await self._until(lambda: self._rec() is not None)  # the configure Impulse applied
        backoff = self._backoff
        while True:
            writer: asyncio.StreamWriter | None = None
            delay = 0.0
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
                await self._session(reader, writer)
            except _ReconnectError:
                # The first abort is sent again at once; a sink that keeps voting no is
                # asked again with back-off, said once and then counted in the status.
                delay = 0.0 if self.aborts_in_a_row <= 1 else backoff.failed()
                if self.aborts_in_a_row == _ABORTS_SAID:
                    self.log.warning("sink %s (%s:%d) voted no on %d transactions in a row; "
                                     "asking again with back-off", self.name, self.host,
                                     self.port, self.aborts_in_a_row)
            except (OSError, SinkLinkError) as e:
                # Only a commit resets the back-off: a sink that refuses right after it
                # took the connection is asked again later and later, said once a streak.
                delay = backoff.failed()
                if self.connected or said_at(backoff.failures):
                    reason = e.strerror if isinstance(e, OSError) and e.strerror else e
                    again = ("" if backoff.failures == 1
                             else f" ({backoff.failures} attempts in a row)")
                    self.log.warning("sink %s (%s:%d): %s%s; reconnecting", self.name,
                                     self.host, self.port, reason, again)
            finally:
                self.connected = False
                if writer is not None:
                    writer.close()
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()
            await asyncio.sleep(delay)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                       ) -> None:
        conn = ConnectorConnection(Role.CONNECTOR, cookie=self.cfg.cookie.encode(), twopc=True,
                                   max_frame_size=self.cfg.max_frame_size)
        arrived = asyncio.Event()

        async def pump() -> None:
            """Reads all the time, so that a sink closing while the link waits on the
            state is noticed at once (the waits below look at what arrived)."""
            data = b"x"
            while data:
                try:
                    data = await reader.read(_READ)
                except OSError:
                    data = b""
                conn.receive_data(data)
                arrived.set()
                self._changed.set()

        async def send(*events: Any) -> None:
            write_unless_closing(writer, b"".join(conn.send(e) for e in events))
            await writer.drain()

        def unexpected(event: Any) -> SinkLinkError:
            if isinstance(event, ConnectionClosed):
                return SinkLinkError("the sink closed the connection")
            if isinstance(event, ErrorFrame):
                return SinkLinkError(f"the sink sent ERROR: {event.reason}")
            return SinkLinkError(f"unexpected {type(event).__name__} from the sink")

        async def expect(kind: type) -> Any:
            while True:
                event = conn.next_event()
                if event is NEED_DATA:
                    arrived.clear()
                    await arrived.wait()
                elif isinstance(event, kind):
                    return event
                elif not isinstance(event, Ack):  # credits: ignored, as Wallaroo did
                    raise unexpected(event)

        async def until(ready: Callable[[], bool]) -> None:
            while True:
                while (event := conn.next_event()) is not NEED_DATA:
                    if not isinstance(event, Ack):
                        raise unexpected(event)
                if ready():
                    return
                self._changed.clear()
                await self._changed.wait()

        reading = asyncio.ensure_future(pump())
        try:
            await send(Hello(SINK_VERSION, self.cfg.cookie.encode(), PROGRAM_NAME,
                             self.instance))
            await expect(Ok)
            self.sessions += 1
            rtag = int.from_bytes(os.urandom(7)) + 1
            await send(ListUncommitted(rtag))
            listed = await expect(ReplyUncommitted)
            self._send_uncommitted(self.name, rtag, list(listed.txn_ids))
            await until(lambda: (r := self._rec()) is not None and r.settled_rtag == rtag)
            rec = self._rec()
            assert rec is not None
            if rec.settlement:
                await send(*(Phase2(t, c) for t, c in rec.settlement))
            await send(Notify(SINK_STREAM_ID, self.name, rec.committed))
            ack = await expect(NotifyAck)
            if not ack.success:
                raise SinkLinkError("the sink refused the output stream (NOTIFY_ACK "
                                    "without success)")
            if ack.point_of_reference > rec.committed:
                # It holds output this coordinator never committed: a Phase1 from our
                # offset would be voted no, and its abort would cut the sink's file back.
                raise SinkLinkError(f"the sink's offset is {ack.point_of_reference} but "
                                    f"{rec.committed} bytes are committed: refusing to send "
                                    "a transaction")
            if ack.point_of_reference < rec.committed:
                # As Wallaroo's sink side: the offset a sink answers may come from its
                # memory (aloc_sink says 0 after its restart, its file holding every
                # committed byte); its own checks of the data and of Phase1 decide.
                self.log.info("sink %s (%s:%d) says offset %d, below the %d bytes committed "
                              "(a restarted sink that keeps its offset in memory); going on "
                              "from %d", self.name, self.host, self.port,
                              ack.point_of_reference, rec.committed, rec.committed)
            self.connected = True
            self.log.info("sink %s (%s:%d): linked at offset %d", self.name, self.host,
                          self.port, rec.committed)
            while True:
                await self._round(send, expect, until)
        except ConnectorProtocolError as e:
            with contextlib.suppress(Exception):
                write_unless_closing(writer, conn.take_error_frame())
            raise SinkLinkError(str(e)) from None
        finally:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading

    async def _materialize(self, parts: list[bytes | Ref]) -> bytes:
        """The transaction's bytes: staged blocks are read (and checked) from their
        segments, in a thread.

        Raises:
            SinkLinkError: a segment is missing or damaged (the line names it).
        """
        if not any(isinstance(p, Ref) for p in parts):
            return b"".join(parts)  # type: ignore[arg-type]

        def read() -> bytes:
            return b"".join(p if isinstance(p, bytes)
                            else bytes(read_block(self.cfg.staging, p).data) for p in parts)

        try:
            return await asyncio.to_thread(read)
        except StagingError as err:
            raise SinkLinkError(str(err)) from None

    async def _round(self, send: Callable[..., Any], expect: Callable[[type], Any],
                     until: Callable[[Callable[[], bool]], Any]) -> None:
        """One transaction: data, Phase1, vote, decision, Phase2."""
        await until(lambda: (r := self._rec()) is not None and bool(r.txn_id))
        rec = self._rec()
        assert rec is not None
        txn, start, end, parts = rec.txn_id, rec.committed, rec.txn_end, rec.txn_parts()
        data = await self._materialize(parts)
        if len(data) != end - start:
            raise SinkLinkError(f"transaction {txn}: {len(data)} bytes where {end - start} "
                                "were emitted")
        frames = [Message(SINK_STREAM_ID, start + off, data[off:off + CHUNK])
                  for off in range(0, len(data), CHUNK)]
        await send(*frames, Phase1(txn, (Where(SINK_STREAM_ID, start, end),)))
        reply = await expect(TwoPCReply)
        if reply.txn_id != txn:
            raise SinkLinkError(f"the sink voted on {reply.txn_id!r}, not {txn!r}")
        self._send_voted(self.name, txn, reply.commit)
        await until(lambda: (r := self._rec()) is None or txn in r.decided
                    or r.txn_id != txn)
        rec = self._rec()
        decision = None if rec is None else rec.decided.get(txn)
        if decision is None:
            raise SinkLinkError(f"transaction {txn} was settled elsewhere")
        await send(Phase2(txn, decision))
        self.aborts_in_a_row = 0 if decision else self.aborts_in_a_row + 1
        if decision:
            self._backoff.progress()  # a commit: real progress
        if not decision:
            self.log.info("sink %s: transaction %s aborted; sending it again", self.name, txn)
            raise _ReconnectError
