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
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.tls import CONFIG_REMEDY, Tls, describe_tls_error
from ambrosia_services.staging import SegmentWriter, StagingError

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

if TYPE_CHECKING:
    from .config import CoordinatorConfig

__all__ = ["BATCH_BYTES", "MAX_IN_FLIGHT", "SourceListener"]

MAX_IN_FLIGHT = 2  # receive/end_of_stream Impulses sent and not yet applied
BATCH_BYTES = 1 << 20  # payload bytes in one receive Impulse (unless one MESSAGE is larger)
# With staging an Impulse carries references only: a staged batch may hold this many
# times ``batch_messages`` MESSAGEs, up to STAGED_BATCH_BYTES of payload (one write, one
# fsync, one logged Impulse for all of them).
STAGED_FACTOR = 32
STAGED_BATCH_BYTES = 8 << 20
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
        self.held_credits = 0  # credits held back while the backlog is over its bound
        self.alive = True

    def write(self, data: bytes) -> None:
        if self.alive and data:
            write_unless_closing(self.writer, data)

    @property
    def peer(self) -> str:
        addr = self.writer.get_extra_info("peername")
        return f"source #{self.n} ({Address(addr[0], addr[1])})" if addr else f"source #{self.n}"


class SourceListener:
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
        self._queue: deque[tuple[_Source, Incoming | int]] = deque()  # int: an EOS
        self._has_work = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._queued_bytes = 0  # payload bytes of the queued MESSAGEs
        self._applied = asyncio.Event()
        # A random start, so a token of an earlier life is never taken for one of ours.
        self._next_token = int.from_bytes(os.urandom(6))
        self._waiting: dict[int, list[tuple[_Source, int, int, set[int]]]] = {}  # frames, MESSAGEs
        self._owners: dict[int, _Source] = {}  # stream id -> the connection holding it
        self._sources: set[_Source] = set()
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
            if isinstance(item, int) or (batch and size + len(item.payload) > BATCH_BYTES):
                break
            size += len(item.payload)
            self._queue.popleft()
            self._queued_bytes -= len(item.payload)
            batch.append(item)
            entry = per.setdefault(src, [src, 0, set()])
            entry[1] += 1
            entry[2].add(item.stream_id)
        self._waiting[token] = [(s, n, n, ids) for s, n, ids in per.values()]
        self._send_receive(token, batch)
        self._maybe_room()

    _retry_seconds = 1.0  # after a failed staging write

    async def _stage_one(self) -> bool:
        """Stage the queue's head and send its Impulse: one EOS as it is, or a run of
        MESSAGEs (at most a batch) written as blocks, synced, then referenced. False when
        the write failed: said in one line, the sources are closed (they re-send from
        their point of reference) and nothing of the batch counts."""
        src, item = self._queue[0]
        if isinstance(item, int):
            self._flush_one()
            return True
        assert self.writer is not None and self._send_staged is not None
        taken: list[tuple[_Source, Incoming]] = []
        size = 0
        while self._queue and len(taken) < self._batch_limit:
            src, item = self._queue[0]
            if isinstance(item, int) or (taken and size + len(item.payload) > self._batch_bytes):
                break
            size += len(item.payload)
            self._queue.popleft()
            self._queued_bytes -= len(item.payload)
            taken.append((src, item))
        runs: list[list[Incoming]] = []
        for _src, item in taken:
            if runs and runs[-1][-1].stream_id == item.stream_id:
                runs[-1].append(item)
            else:
                runs.append([item])
        token = self._next_token
        self._next_token += 1
        try:
            refs = await asyncio.to_thread(self._write_runs, token, runs)
        except (StagingError, OSError) as err:
            self.staging_failures += 1
            self._failures_in_a_row += 1
            self._accepted = dict(self._staged)  # what was not staged may come again
            n = self._failures_in_a_row
            if n & (n - 1) == 0:  # the first, then the 2nd, 4th, 8th ... in a row
                self.log.warning("staging: %s; %d messages not acknowledged, sources closed "
                                 "(they send again from their point of reference)%s",
                                 err, len(taken), f" ({n} times in a row)" if n > 1 else "")
            for s in list(self._sources):
                s.alive = False
                s.writer.close()
            self._queue.clear()
            self._queued_bytes = 0
            self._room.set()
            return False
        if self._failures_in_a_row:
            self.log.info("staging works again after %d failed writes",
                          self._failures_in_a_row)
            self._failures_in_a_row = 0
        per: dict[_Source, list[Any]] = {}
        for src, item in taken:
            entry = per.setdefault(src, [src, 0, set()])
            entry[1] += 1
            entry[2].add(item.stream_id)
        for run in runs:
            self._staged[run[0].stream_id] = run[-1].msg_id
        self._waiting[token] = [(s, n, n, ids) for s, n, ids in per.values()]
        self._send_staged(token, refs)
        self._maybe_room()
        return True

    @property
    def _batch_limit(self) -> int:
        return self.cfg.batch_messages * (STAGED_FACTOR if self.writer is not None else 1)

    @property
    def _batch_bytes(self) -> int:
        return STAGED_BATCH_BYTES if self.writer is not None else BATCH_BYTES

    def _write_runs(self, token: int, runs: list[list[Incoming]]) -> list[IncomingRef]:
        """In a thread: one block per run, then one sync for them all. The segments
        written are busy (under ``token``) before the lock is let go."""
        assert self.writer is not None
        out = []
        with self._segments_lock:
            for run in runs:
                first, last = run[0], run[-1]
                ref = self.writer.append(first.stream_id, first.msg_id, last.msg_id,
                                         [m.payload for m in run], [m.msg_id for m in run],
                                         [m.key for m in run])
                out.append([first.stream, *ref.to_list()])
                self._inflight_segments.setdefault(token, set()).add(ref.segment)
            try:
                self.writer.sync()
            except BaseException:
                self._inflight_segments.pop(token, None)
                raise
        return out

    def _full(self) -> bool:
        return (len(self._queue) >= _QUEUE_FACTOR * self._batch_limit
                or self._queued_bytes >= _QUEUE_FACTOR * self._batch_bytes)

    def _maybe_room(self) -> None:
        if not self._full():
            self._room.set()

    def _enqueue(self, src: _Source, item: Incoming | int) -> None:
        self._queue.append((src, item))
        if not isinstance(item, int):
            self._queued_bytes += len(item.payload)
        self._has_work.set()
        if self._full():
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

    def _on_event(self, src: _Source, event: Any) -> bool:
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

    def _drop(self, src: _Source) -> None:
        src.alive = False
        self._sources.discard(src)
        for sid in [s for s, holder in self._owners.items() if holder is src]:
            del self._owners[sid]
