"""The sink side of the primary: one link per sink, a reconciler between what the state
wants (the transaction in flight, the decisions to deliver) and what the link has done.

A link connects out (back-off, capped) and runs one ``sink_session.SinkSession`` per
connection: the 2PC conversation itself, without I/O. The link moves its bytes, turns what
it reports into the ``sink_uncommitted`` and ``sink_voted`` Impulses, reads a transaction's
staged blocks from their segments, and steps it again whenever the sink sends something or
the handlers wake it (the sink's state changed).

After an abort the link reconnects at once: the aborted bytes go again from the same
offsets, which a connection (message ids rise per stream) only allows after a new NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable
from typing import Any

from ambrosia_core.loops import said_at, write_unless_closing
from ambrosia_core.retry import Attempts, Retry
from ambrosia_core.tls import describe_tls_error
from ambrosia_services.staging import Ref, StagingError, read_block

from ..errors import ConnectorProtocolError
from .config import CoordinatorConfig, parse_address
from .core import ConnectorCore, SinkRecord
from .sink_session import (
    Action,
    Decided,
    Linked,
    Read,
    ReportUncommitted,
    ReportVote,
    SinkLinkError,
    SinkSession,
    Write,
)

__all__ = ["SinkLink"]

_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0
_ABORTS_SAID = 3  # no votes in a row after which the back-off is said (once)
_READ = 64 * 1024


class _ReconnectError(Exception):
    """End this connection and connect again at once (after an abort)."""


# A link connects again after a lost connection, a refusal, a broken conversation or an
# abort (the wait: ``SinkLink._delay``); anything else is a bug and ends the instance.
_RETRY = Retry(floor=_FIRST_DELAY, cap=_MAX_DELAY, on=(OSError, SinkLinkError, _ReconnectError))


class SinkLink:
    """The link to one sink.

    Args:
        name: the sink's name (its key in ``sinks``, the name of its stream 1).
        core: the coordinator's state (read only).
        cfg: the configuration.
        instance: the instance name (sent in HELLO).
        send_uncommitted / send_voted: send the ``sink_uncommitted`` / ``sink_voted``
            Impulses.
        on_decided: told ``(name, txn_id, commit)`` as each Phase2 goes out (the commit
            clock).
    """

    def __init__(self, name: str, core: Callable[[], ConnectorCore], cfg: CoordinatorConfig,
                 instance: str, send_uncommitted: Callable[[str, int, list[str]], None],
                 send_voted: Callable[[str, str, bool], None],
                 log: logging.LoggerAdapter[Any],
                 on_decided: Callable[[str, str, bool], None] | None = None) -> None:
        self.name = name
        self._core = core
        self.cfg = cfg
        self.instance = instance
        self.address = parse_address(cfg.sinks[name], f"sinks.{name}")
        self._send_uncommitted = send_uncommitted
        self._send_voted = send_voted
        self._on_decided = on_decided
        self.log = log
        self._changed = asyncio.Event()
        self.connected = False
        self.aborts_in_a_row = 0  # transactions the sink voted no on since its last commit
        self._was_connected = False  # the connection that just ended had linked
        # The driver (ambrosia_py.effects) runs ``run`` as attempts: see _RETRY.
        self.attempts = Attempts(_RETRY, delay=self._delay)
        self._tls = cfg.load_tls()  # the sink's certificate is checked, ours shown

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
        """One connection to the sink, until it ends (always with an error); ``attempts``
        connects again as ``_RETRY`` and ``_delay`` say."""
        if self.attempts.started == 1:  # the configure Impulse applied, before the first
            await self._until(lambda: self._rec() is not None)
        writer: asyncio.StreamWriter | None = None
        try:
            if self._tls is None:
                reader, writer = await asyncio.open_connection(self.address.host,
                                                             self.address.port)
            else:
                reader, writer = await self._tls.connect(self.address.host, self.address.port)
            await self._session(reader, writer)
        finally:
            self._was_connected, self.connected = self.connected, False
            if writer is not None:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    def _delay(self, error: Exception, attempts: Attempts) -> float:
        """The wait before the next connection, and what is said of the one that ended."""
        if isinstance(error, _ReconnectError):
            # The first abort is sent again at once; a sink that keeps voting no is asked
            # again with back-off, said once and then counted in the status.
            delay = 0.0 if self.aborts_in_a_row <= 1 else attempts.next_wait()
            if self.aborts_in_a_row == _ABORTS_SAID:
                self.log.warning("sink %s (%s) voted no on %d transactions in a row; "
                                 "asking again with back-off", self.name, self.address,
                                 self.aborts_in_a_row)
            return delay
        # Only a commit resets the back-off: a sink that refuses right after it took the
        # connection is asked again later and later, said once a streak.
        delay = attempts.next_wait()
        if self._was_connected or said_at(attempts.failures):
            reason = (describe_tls_error(error) if isinstance(error, ssl.SSLError) else
                      error.strerror if isinstance(error, OSError) and error.strerror
                      else error)
            again = ("" if attempts.failures == 1 else
                     f" ({attempts.failures} attempts in a row)")
            self.log.warning("sink %s (%s): %s%s; reconnecting", self.name, self.address,
                             reason, again)
        return delay

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                       ) -> None:
        session = SinkSession(self.name, self.instance, self.cfg.cookie.encode(),
                              int.from_bytes(os.urandom(7)) + 1,
                              max_frame_size=self.cfg.max_frame_size)

        async def pump() -> None:
            """Reads all the time, so that a sink closing while the link waits on the
            state is noticed at once."""
            data = b"x"
            while data:
                try:
                    data = await reader.read(_READ)
                except OSError:
                    data = b""
                session.receive_data(data)
                self._changed.set()

        reading = asyncio.ensure_future(pump())
        try:
            await self._do(writer, session, [session.start()])
            while True:
                actions = session.step(self._rec())
                if actions:
                    await self._do(writer, session, actions)
                else:
                    self._changed.clear()
                    await self._changed.wait()
        except ConnectorProtocolError as e:
            with contextlib.suppress(Exception):
                write_unless_closing(writer, session.error_frame())
            raise SinkLinkError(str(e)) from None
        finally:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading

    async def _do(self, writer: asyncio.StreamWriter, session: SinkSession,
                  actions: list[Action]) -> None:
        """Carry out what the session asked for, in order."""
        for action in actions:
            if isinstance(action, Write):
                write_unless_closing(writer, action.data)
                await writer.drain()
            elif isinstance(action, ReportUncommitted):
                self._send_uncommitted(self.name, action.rtag, list(action.txn_ids))
            elif isinstance(action, ReportVote):
                self._send_voted(self.name, action.txn_id, action.commit)
            elif isinstance(action, Read):
                data = await self._materialize(list(action.parts))
                await self._do(writer, session, session.materialized(data))
            elif isinstance(action, Linked):
                self._linked(action)
            elif isinstance(action, Decided):
                self._decided(action)

    def _linked(self, linked: Linked) -> None:
        if linked.sink_offset < linked.offset:
            self.log.info("sink %s (%s) says offset %d, below the %d bytes committed "
                          "(a restarted sink that keeps its offset in memory); going on "
                          "from %d", self.name, self.address, linked.sink_offset,
                          linked.offset, linked.offset)
        self.connected = True
        self.log.info("sink %s (%s): linked at offset %d", self.name, self.address,
                      linked.offset)

    def _decided(self, decided: Decided) -> None:
        if self._on_decided is not None:
            self._on_decided(self.name, decided.txn_id, decided.commit)
        self.aborts_in_a_row = 0 if decided.commit else self.aborts_in_a_row + 1
        if decided.commit:
            self.attempts.progress()  # a commit: real progress
            return
        self.log.info("sink %s: transaction %s aborted; sending it again", self.name,
                      decided.txn_id)
        raise _ReconnectError

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
