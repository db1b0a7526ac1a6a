"""The source side of the primary: a thin asyncio listener over ``ConnectorConnection``.

Frames become Impulses; nothing here changes the coordinator's state. MESSAGEs from every
connection join one queue, which is sent as ``receive`` Impulses of at most
``batch_messages`` MESSAGEs (and about ``BATCH_BYTES``) each, with at most
``MAX_IN_FLIGHT`` Impulses not yet applied (so a batch grows while the log writes the
previous one). A connection's ACK (its credits back,
and each stream's point of reference from the state) goes out only once the handler of
the Impulse carrying its messages has run, which is after the coordinator logged it:
everything acknowledged is in the log.

With a staging root (``staging``), a batch's MESSAGEs are first written to a staged segment
as one block per run of one stream, made durable, and the Impulse (``receive_staged``)
carries only the blocks' references. A re-sent MESSAGE whose id this life has already
staged for its stream is dropped here (its credit goes back at once), so that no run
straddles a point of reference. While the backlog (staged bytes the state still holds) is
at or above ``backlog_bytes``, ACKs carry no credits; the credits held go back once it is
below (back-pressure: a feed faster than Spark is slowed, not buffered without end).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ambrosia_core.addresses import Address
from ambrosia_core.errors import UsageError
from ambrosia_core.tls import CONFIG_REMEDY, Tls, describe_tls_error
from ambrosia_services.staging import SegmentWriter

from .._state import ConnectionState, Role
from ..connection import ConnectorConnection
from ..errors import ConnectorProtocolError
from ..frames import (
    Ack,
    ConnectionClosed,
    EosMessage,
    ErrorFrame,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Restart,
)
from .config import CoordinatorConfigError
from .core import FROM_START, ConnectorCore, Incoming, IncomingRef
from .source_batches import BATCH_BYTES, LinkedSource, SourceBatches

if TYPE_CHECKING:
    from .config import CoordinatorConfig

__all__ = ["BATCH_BYTES", "MAX_IN_FLIGHT", "SourceListener"]

MAX_IN_FLIGHT = 2  # receive/end_of_stream Impulses sent and not yet applied
_READ = 64 * 1024


class SourceListener(SourceBatches):
    """Accepts source connections while the instance is primary.

    Args:
        core: the coordinator's state (read only: points of reference for NOTIFY_ACK, ACK).
        cfg: the configuration.
        send_receive: sends the ``receive(token, batch)`` Impulse.
        send_eos: sends the ``end_of_stream(token, stream_id)`` Impulse.
        log: where one line per event worth knowing goes.
    """

    def __init__(self, core: Callable[[], ConnectorCore], cfg: CoordinatorConfig,
                 send_receive: Callable[[int, list[Incoming]], None],
                 send_eos: Callable[[int, int], None], log: logging.LoggerAdapter[Any],
                 send_staged: Callable[[int, list[IncomingRef]], None] | None = None,
                 writer: SegmentWriter | None = None) -> None:
        self._core = core
        self._send_staged = send_staged
        self.writer = writer
        # With staging: the last id this life accepted (queued) and staged (sent) per stream.
        self._accepted: dict[int, int] = {}
        self._staged: dict[int, int] = {}
        # token -> the segments its Impulse names, from the write until it is applied;
        # with the writer's current segment these are never deleted (``busy_segments``).
        self._inflight_segments: dict[int, set[str]] = {}
        self._segments_lock = threading.Lock()
        self.staging_failures = 0
        self._failures_in_a_row = 0
        self.early_drops = 0  # re-sent MESSAGEs dropped before staging
        self.cfg = cfg
        self._send_receive = send_receive
        self._send_eos = send_eos
        self.log = log
        self._cookie = cfg.cookie.encode()
        self._queue: deque[tuple[LinkedSource, Incoming | int]] = deque()  # int: an EOS
        self._has_work = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._queued_bytes = 0  # payload bytes of the queued MESSAGEs
        self._applied = asyncio.Event()
        # A random start, so a token of an earlier life is never taken for one of ours.
        self._next_token = int.from_bytes(os.urandom(6))
        # token -> (source, frames, MESSAGEs, stream ids) of what its Impulse carries
        self._waiting: dict[int, list[tuple[LinkedSource, int, int, set[int]]]] = {}
        self._owners: dict[int, LinkedSource] = {}  # stream id -> the connection holding it
        self._sources: set[LinkedSource] = set()
        self._count = 0
        self.server: asyncio.Server | None = None
        self._tls: Tls | None = None  # loaded by ``start``
        self.received = 0  # MESSAGEs, this life
        self.acked = 0  # MESSAGEs ACKed, this life
        self.port = 0

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        listen = self.cfg.listen_address
        try:
            self.cfg.tls.check_listen(listen.host, "the source listener", self.log.warning,
                                      remedy=CONFIG_REMEDY)
        except UsageError as err:
            raise CoordinatorConfigError(f"listen: {err}") from None
        self._tls = self.cfg.load_tls()
        try:
            if self._tls is None:
                self.server = await asyncio.start_server(self._serve, listen.host,
                                                         listen.port)
            else:
                self.server = await self._tls.start_server(
                    self._serve, listen.host, listen.port,
                    timeout=self.cfg.handshake_seconds,
                    refused=lambda why: self.log.warning("refused a source: %s", why))
        except OSError as err:  # the instance stops with this line (a failed side effect)
            raise CoordinatorConfigError(
                f"listen: cannot listen for sources on {listen}: "
                f"{err.strerror or err}") from None
        self.port = self.server.sockets[0].getsockname()[1]
        self.log.info("listening for sources on %s%s", Address(listen.host, self.port),
                      " over TLS" if self._tls is not None else "")

    async def run_flusher(self) -> None:
        while True:
            await self._has_work.wait()
            while len(self._waiting) >= MAX_IN_FLIGHT:
                self._applied.clear()
                await self._applied.wait()
            await asyncio.sleep(0)  # one loop turn: let readers add to the batch
            if self.writer is None:
                self._flush_one()
            elif not await self._stage_one():
                await asyncio.sleep(self._retry_seconds)
            if not self._queue:
                self._has_work.clear()

    def close(self, advertise: str) -> None:
        """An ordinary stop: RESTART (with ``advertise``) to every source, then close."""
        if self.server is not None:
            self.server.close()
        for src in list(self._sources):
            if src.conn.state is ConnectionState.STREAMING:
                with contextlib.suppress(ConnectorProtocolError):
                    src.write(src.conn.send(Restart(advertise)))
            src.alive = False
            src.writer.close()

    @property
    def connections(self) -> int:
        return len(self._sources)

    def busy_segments(self) -> set[str]:
        """Segments that may not be deleted yet though the state holds none of their
        blocks: the one being written, and those named by Impulses not yet applied.
        Thread-safe; no write is half done while it is taken."""
        with self._segments_lock:
            busy = set().union(*self._inflight_segments.values())
            if self.writer is not None and self.writer.current:
                busy.add(self.writer.current)
            return busy

    # ------------------------------------------------------------ back-pressure
    def _over_backlog(self) -> bool:
        return self.writer is not None and self._core().backlog >= self.cfg.backlog_bytes

    def release_credits(self) -> None:
        """Give back the credits held while the backlog was over its bound, if it is no
        longer (called when handlers changed the state)."""
        if self._over_backlog():
            return
        for src in self._sources:
            if src.held_credits and src.alive:
                credits, src.held_credits = src.held_credits, 0
                try:
                    src.write(src.conn.send(Ack(credits, ())))
                except ConnectorProtocolError as e:
                    self.log.warning("%s: no ACK sent: %s", src.peer, e)

    @property
    def held_credits(self) -> int:
        return sum(src.held_credits for src in self._sources)

    # ------------------------------------------------------------ applied
    def applied(self, token: int) -> None:
        """The Impulse ``token`` was applied: ACK what it carried."""
        entries = self._waiting.pop(token, None)
        if token in self._inflight_segments:
            with self._segments_lock:
                del self._inflight_segments[token]
        self._applied.set()
        if entries is None:
            return  # an earlier life's Impulse, or not one of this listener's
        core = self._core()
        hold = self._over_backlog()
        for src, frames, messages, streams in entries:
            acks = []
            for sid in sorted(streams):
                rec = core.streams.get(sid)
                if rec is not None and rec.por != FROM_START:
                    acks.append((sid, rec.por))
            self.acked += messages
            if not src.alive:
                continue
            credits, src.extra_credits = frames + src.extra_credits, 0
            if hold:
                src.held_credits += credits
                credits = 0
            elif src.held_credits:
                credits, src.held_credits = credits + src.held_credits, 0
            try:
                src.write(src.conn.send(Ack(credits, tuple(acks))))
            except ConnectorProtocolError as e:
                self.log.warning("%s: no ACK sent: %s", src.peer, e)

    # ------------------------------------------------------------ one connection
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._count += 1
        conn = ConnectorConnection(Role.WORKER, cookie=self._cookie,
                                   max_frame_size=self.cfg.max_frame_size)
        src = LinkedSource(self._count, writer, conn)
        if len(self._sources) >= self.cfg.max_sources:
            self.log.warning("%s: refused: %d sources are connected (max_sources)",
                             src.peer, len(self._sources))
            with contextlib.suppress(Exception):
                writer.write(conn.send(ErrorFrame("too many connections")))
                writer.close()
            return
        self._sources.add(src)
        try:
            while src.alive:
                await self._room.wait()
                # A HELLO, and the rest of a frame begun, must come in time; between
                # frames a source may be idle for as long as it likes.
                waiting = conn.state is ConnectionState.CONNECTED or conn.partial_frame
                try:
                    async with asyncio.timeout(self.cfg.handshake_seconds if waiting
                                               else None):
                        data = await reader.read(_READ)
                except TimeoutError:
                    what = ("no HELLO" if conn.state is ConnectionState.CONNECTED
                            else "the rest of a frame not sent")
                    self.log.warning("%s: %s within %g s; closed", src.peer, what,
                                     self.cfg.handshake_seconds)
                    return
                conn.receive_data(data)
                for event in conn.events():
                    if not self._on_event(src, event):
                        return
                await writer.drain()
        except ConnectorProtocolError as e:
            src.write(conn.take_error_frame())
            self.log.warning("%s: %s; closed", src.peer, e)
        except ssl.SSLError as e:  # an altered, replayed or cut TLS record
            self.log.warning("%s: %s; closed", src.peer, describe_tls_error(e))
        except (ConnectionError, OSError) as e:
            self.log.info("%s: connection lost: %s", src.peer, e)
        except asyncio.CancelledError:
            # The instance is stopping. Ending quietly rather than re-raising: asyncio's
            # start_server (3.11) asks a cancelled handler task for its exception, which
            # raises again and logs a traceback for a routine stop.
            pass
        finally:
            self._drop(src)
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()

    def _on_event(self, src: LinkedSource, event: Any) -> bool:
        """Act on one event; False ends the connection."""
        conn = src.conn
        match event:
            case Message(sid, mid, payload, event_time, key):
                self.received += 1
                if self.writer is not None and not self._accept(sid, mid):
                    self.early_drops += 1
                    src.write(conn.send(Ack(1, ())))  # its credit, at once
                    return True
                self._enqueue(src, Incoming(sid, src.names.get(sid, ""), mid, event_time, key,
                                            payload))
            case Notify(sid, name, _por):
                src.extra_credits += 1
                holder = self._owners.get(sid)
                core_rec = self._core().streams.get(sid)
                por = FROM_START if core_rec is None else core_rec.por
                if holder is not None and holder is not src and holder.alive:
                    self.log.warning("%s: stream %d (%s) is held by %s; NOTIFY refused",
                                     src.peer, sid, name, holder.peer)
                    src.write(conn.send(NotifyAck(False, sid, por)))
                else:
                    self._owners[sid] = src
                    src.names[sid] = name
                    src.write(conn.send(NotifyAck(True, sid, por)))
            case EosMessage(sid):
                if self._owners.get(sid) is src:
                    del self._owners[sid]
                self._enqueue(src, sid)
            case Hello(_version, _cookie, program, instance):
                self.log.info("%s: HELLO from %s/%s", src.peer, program, instance)
                src.write(conn.send(Ok(self.cfg.credits)))
            case ErrorFrame(reason):
                self.log.warning("%s sent ERROR: %s; closed", src.peer, reason)
                return False
            case ConnectionClosed():
                return False
        return True

    def _accept(self, sid: int, mid: int) -> bool:
        """With staging: whether MESSAGE ``mid`` of stream ``sid`` is above everything
        this life accepted for it (and above the state's point of reference)."""
        last = self._accepted.get(sid)
        if last is None:
            rec = self._core().streams.get(sid)
            last = -1 if rec is None or rec.por == FROM_START else rec.por
        if mid <= last:
            return False
        self._accepted[sid] = mid
        return True

    def _drop(self, src: LinkedSource) -> None:
        src.alive = False
        self._sources.discard(src)
        for sid in [s for s, holder in self._owners.items() if holder is src]:
            del self._owners[sid]
