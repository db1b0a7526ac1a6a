"""How the source listener batches: the queue of MESSAGEs and EOSs from every connection,
cut into ``receive`` Impulses of at most ``batch_messages`` MESSAGEs and about
``BATCH_BYTES``; with a staging root, written first to a staged segment as one block per
run of one stream and synced, so that the Impulse (``receive_staged``) carries only the
blocks' references. A part of ``sources.SourceListener``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ambrosia_core.addresses import Address
from ambrosia_core.loops import write_unless_closing
from ambrosia_services.staging import SegmentWriter, StagingError

from ..connection import ConnectorConnection
from .core import Incoming, IncomingRef

if TYPE_CHECKING:
    from .config import CoordinatorConfig

__all__ = ["BATCH_BYTES", "LinkedSource", "SourceBatches"]

BATCH_BYTES = 1 << 20  # payload bytes in one receive Impulse (unless one MESSAGE is larger)
# With staging an Impulse carries references only: a staged batch may hold this many
# times ``batch_messages`` MESSAGEs, up to STAGED_BATCH_BYTES of payload (one write, one
# fsync, one logged Impulse for all of them).
STAGED_FACTOR = 32
STAGED_BATCH_BYTES = 8 << 20
_QUEUE_FACTOR = 4  # readers pause while this many batches wait to be sent


class LinkedSource:
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


class SourceBatches:
    """The listener's batching (a part of ``SourceListener``)."""

    cfg: CoordinatorConfig
    log: logging.LoggerAdapter[Any]
    writer: SegmentWriter | None
    staging_failures: int
    _failures_in_a_row: int
    _accepted: dict[int, int]
    _staged: dict[int, int]
    _inflight_segments: dict[int, set[str]]
    _segments_lock: threading.Lock
    _queue: deque[tuple[LinkedSource, Incoming | int]]
    _queued_bytes: int
    _has_work: asyncio.Event
    _room: asyncio.Event
    _next_token: int
    _waiting: dict[int, list[tuple[LinkedSource, int, int, set[int]]]]
    _sources: set[LinkedSource]
    _send_receive: Callable[[int, list[Incoming]], None]
    _send_eos: Callable[[int, int], None]
    _send_staged: Callable[[int, list[IncomingRef]], None] | None

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
        per: dict[LinkedSource, list[Any]] = {}
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
        taken: list[tuple[LinkedSource, Incoming]] = []
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
        per: dict[LinkedSource, list[Any]] = {}
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

    def _enqueue(self, src: LinkedSource, item: Incoming | int) -> None:
        self._queue.append((src, item))
        if not isinstance(item, int):
            self._queued_bytes += len(item.payload)
        self._has_work.set()
        if self._full():
            self._room.clear()
