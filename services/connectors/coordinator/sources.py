"""The source side of the primary: a thin asyncio listener over ``ConnectorConnection``.

Frames become Impulses; nothing here changes the coordinator's state. MESSAGEs from every
connection join one queue, which is sent as ``receive`` Impulses of at most
``batch_messages`` MESSAGEs (and about ``BATCH_BYTES``) each, with at most
``MAX_IN_FLIGHT`` Impulses not yet applied (so a batch grows while the log writes the
previous one). A connection's ACK (its credits back,
and each stream's point of reference from the state) goes out only once the handler of
the Impulse carrying its messages has run, which is after the coordinator logged it:
everything acknowledged is in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ambrosia_py.loops import write_unless_closing

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
from .core import FROM_START, CoordinatorCore, Incoming

if TYPE_CHECKING:
    from .config import CoordinatorConfig

__all__ = ["BATCH_BYTES", "MAX_IN_FLIGHT", "SourceListener"]

MAX_IN_FLIGHT = 2  # receive/end_of_stream Impulses sent and not yet applied
BATCH_BYTES = 1 << 20  # payload bytes in one receive Impulse (unless one MESSAGE is larger)
_READ = 64 * 1024
_QUEUE_FACTOR = 4  # readers pause while this many batches wait to be sent


class _Source:
    """One source connection."""

    def __init__(self, n: int, writer: asyncio.StreamWriter, conn: ConnectorConnection
                 ) -> None:
        self.n = n
        self.writer = writer
        self.conn = conn
        self.names: dict[int, str] = {}  # stream id -> name, from its NOTIFY
        self.extra_credits = 0  # frames (NOTIFYs) whose credit rides on the next ACK
        self.alive = True

    def write(self, data: bytes) -> None:
        if self.alive and data:
            write_unless_closing(self.writer, data)

    @property
    def peer(self) -> str:
        addr = self.writer.get_extra_info("peername")
        return f"source #{self.n} ({addr[0]}:{addr[1]})" if addr else f"source #{self.n}"


class SourceListener:
    """Accepts source connections while the instance is primary.

    Args:
        core: the coordinator's state (read only: points of reference for NOTIFY_ACK, ACK).
        cfg: the configuration.
        send_receive: sends the ``receive(token, batch)`` Impulse.
        send_eos: sends the ``end_of_stream(token, stream_id)`` Impulse.
        log: where one line per event worth knowing goes.
    """

    def __init__(self, core: Callable[[], CoordinatorCore], cfg: CoordinatorConfig,
                 send_receive: Callable[[int, list[Incoming]], None],
                 send_eos: Callable[[int, int], None], log: logging.LoggerAdapter[Any]
                 ) -> None:
        self._core = core
        self.cfg = cfg
        self._send_receive = send_receive
        self._send_eos = send_eos
        self.log = log
        self._cookie = cfg.cookie.encode()
        self._queue: deque[tuple[_Source, Incoming | int]] = deque()  # int: an EOS
        self._has_work = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._applied = asyncio.Event()
        # A random start, so a token of an earlier life is never taken for one of ours.
        self._next_token = int.from_bytes(os.urandom(6))
        self._waiting: dict[int, list[tuple[_Source, int, int, set[int]]]] = {}  # frames, MESSAGEs
        self._owners: dict[int, _Source] = {}  # stream id -> the connection holding it
        self._sources: set[_Source] = set()
        self._count = 0
        self.server: asyncio.Server | None = None
        self.received = 0  # MESSAGEs, this life
        self.acked = 0  # MESSAGEs ACKed, this life
        self.port = 0

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        host, port = self.cfg.listen_address
        try:
            self.server = await asyncio.start_server(self._serve, host, port)
        except OSError as err:  # the instance stops with this line (a failed side effect)
            raise CoordinatorConfigError(
                f"listen: cannot listen for sources on {host}:{port}: "
                f"{err.strerror or err}") from None
        self.port = self.server.sockets[0].getsockname()[1]
        self.log.info("listening for sources on %s:%d", host, self.port)

    async def run_flusher(self) -> None:
        while True:
            await self._has_work.wait()
            while len(self._waiting) >= MAX_IN_FLIGHT:
                self._applied.clear()
                await self._applied.wait()
            await asyncio.sleep(0)  # one loop turn: let readers add to the batch
            self._flush_one()
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

    # ------------------------------------------------------------ applied
    def applied(self, token: int) -> None:
        """The Impulse ``token`` was applied: ACK what it carried."""
        entries = self._waiting.pop(token, None)
        self._applied.set()
        if entries is None:
            return  # an earlier life's Impulse, or not one of this listener's
        core = self._core()
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
            try:
                src.write(src.conn.send(Ack(credits, tuple(acks))))
            except ConnectorProtocolError as e:
                self.log.warning("%s: no ACK sent: %s", src.peer, e)

    # ------------------------------------------------------------ batching
    def _flush_one(self) -> None:
        """Send the queue's head: one EOS, or a run of MESSAGEs (at most a batch)."""
        if not self._queue:
            return
        token = self._next_token
        self._next_token += 1
        src, item = self._queue[0]
        if isinstance(item, int):
            self._queue.popleft()
            self._waiting[token] = [(src, 1, 0, {item})]
            self._send_eos(token, item)
            return
        batch: list[Incoming] = []
        size = 0
        per: dict[_Source, list[Any]] = {}
        while self._queue and len(batch) < self.cfg.batch_messages:
            src, item = self._queue[0]
            if isinstance(item, int) or (batch and size + len(item[5]) > BATCH_BYTES):
                break
            size += len(item[5])
            self._queue.popleft()
            batch.append(item)
            entry = per.setdefault(src, [src, 0, set()])
            entry[1] += 1
            entry[2].add(item[0])
        self._waiting[token] = [(s, n, n, ids) for s, n, ids in per.values()]
        self._send_receive(token, batch)
        if len(self._queue) < _QUEUE_FACTOR * self.cfg.batch_messages:
            self._room.set()

    def _enqueue(self, src: _Source, item: Incoming | int) -> None:
        self._queue.append((src, item))
        self._has_work.set()
        if len(self._queue) >= _QUEUE_FACTOR * self.cfg.batch_messages:
            self._room.clear()

    # ------------------------------------------------------------ one connection
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._count += 1
        conn = ConnectorConnection(Role.WORKER, cookie=self._cookie,
                                   max_frame_size=self.cfg.max_frame_size)
        src = _Source(self._count, writer, conn)
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

    def _on_event(self, src: _Source, event: Any) -> bool:
        """Act on one event; False ends the connection."""
        conn = src.conn
        match event:
            case Message(sid, mid, payload, event_time, key):
                self.received += 1
                self._enqueue(src, (sid, src.names.get(sid, ""), mid, event_time, key, payload))
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

    def _drop(self, src: _Source) -> None:
        src.alive = False
        self._sources.discard(src)
        for sid in [s for s, holder in self._owners.items() if holder is src]:
            del self._owners[sid]
