"""The only place with sockets: connects an ``Engine`` to its coordinator's two ports.

Plain I/O, as with any sans-IO session: one task reads the coordinator's send port into
a bounded queue (so a fast coordinator cannot make us buffer without bound); the main
task hands what it reads to ``Engine.receive_data`` and writes what ``Engine.next_output``
returns (bytes, or a checkpoint's chunks), waiting on ``drain()`` so that a slow
coordinator slows us down rather than growing our write buffer. Impulses from
outside-world threads are bounded too: past ``IMPULSE_QUEUE_LIMIT`` queued bytes the
sending thread waits (see ``outbox``), so a coordinator that stops reading stops the
producers instead of filling memory.

The engine's ``wakeup`` (something was queued by another thread) sets a flag and puts at
most one wake-up in the queue, beside the data; the data's bound does not apply to it,
so a wake-up is never dropped, whatever the queue holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable

from ..errors import CoordinatorError
from ..stopping import StopReason
from .engine import Engine, SendCheckpoint

__all__ = ["DRAIN_SECONDS", "ImmortalRunner", "connect_with_retry"]

_KICK = b"kick"  # a distinct object, compared by identity
_INBOX_CHUNKS = 8  # chunks read ahead of the engine before the reader waits
# Reads and checkpoint sends of up to 1 MiB: at 64 KiB a large checkpoint or a long replay
# paid a loop turn, a queue hop and a decoder call per 64 KiB. The reader buffers at most
# two chunks before it stops reading the socket, and the inbox holds at most 8.
_CHUNK = 1 << 20
_WRITE_HIGH_WATER = 1 << 20
_DRAW_EVERY = 0.25  # seconds between redraws of the replay's progress bar on a terminal
DRAIN_SECONDS = 10.0  # the longest an ordinary stop waits for side effects to end
_LOG_EVERY = 5.0  # seconds between progress lines in the log
_BAR = 30  # the bar's width in characters


def progress_line(done: int, total: int | None) -> str:
    """One line of replay progress: a bar and a percentage when the total is known."""
    if not total:
        return f"replaying the log: {done:,} records"
    frac = min(done / total, 1.0)
    filled = int(frac * _BAR)
    return (f"replaying the log [{'#' * filled}{'.' * (_BAR - filled)}] {frac:4.0%} "
            f"{done:,} of about {total:,} records")


async def connect_with_retry(host: str, port: int, timeout: float
                             ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect, retrying while the coordinator starts (up to ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            return await asyncio.open_connection(host, port, limit=_CHUNK)
        except OSError as e:
            if time.monotonic() >= deadline:
                raise CoordinatorError(
                    f"cannot connect to the coordinator at {host}:{port}: {e.strerror or e}"
                ) from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)


class ImmortalRunner:
    """Runs an engine against a coordinator until it closes the connection or ``stop()``.

    Args:
        engine: the engine (immortal class and instance name).
        receive_port: the coordinator's receive port (binding -> coordinator).
        send_port: the coordinator's send port (coordinator -> binding).
        progress: draw the replay's progress on stderr (default: when it is a terminal);
            otherwise it goes to the log, at INFO, every few seconds.
        replay_estimate: about how many records the recovery will replay, if known (then
            the progress is a bar with a percentage, not just a running count).
        drain_seconds: how long an ordinary stop waits for the side effects to end
            while their Impulses are still logged.
    """

    def __init__(self, engine: Engine, receive_port: int, send_port: int, *,
                 host: str = "127.0.0.1", connect_timeout: float = 15.0,
                 progress: bool | None = None, replay_estimate: int | None = None,
                 drain_seconds: float = DRAIN_SECONDS) -> None:
        self.engine = engine
        self.receive_port = receive_port
        self.send_port = send_port
        self.host = host
        self.connect_timeout = connect_timeout
        self.log = engine.log
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.closed_by_coordinator = False
        self.stop_asked = False  # stop() was called
        self.drain_seconds = drain_seconds
        self._draining: asyncio.Task[None] | None = None
        # Unbounded: the reader bounds its data with _room; wake-ups and the stop mark
        # are never refused.
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._room = asyncio.Semaphore(_INBOX_CHUNKS)
        self._kicked = False  # a wake-up is in the inbox, not yet taken
        self._writer: asyncio.StreamWriter | None = None
        self._stopping = False
        self._last_progress = time.monotonic()
        self._drew_progress = False
        self.replay_estimate = replay_estimate
        self.peak_write_buffer = 0  # the most bytes ever waiting in the socket's buffer

    def stop(self, then: Callable[[], None] | None = None) -> None:
        """An ordinary stop (safe from signal handlers on the loop). A primary's side
        effects end first, while the coordinator still logs their Impulses (up to
        ``drain_seconds``); then the runner stops after the event being handled, or, with
        ``then``, calls it instead (``ambrosia run`` stops its coordinator then, whose
        closing the connection ends the runner; it is an ordinary stop too). A second
        call stops at once."""
        self.stop_asked = True
        if self._draining is None and self.engine.is_primary and self._writer is not None:
            self._draining = asyncio.get_running_loop().create_task(
                self._drain(then or self._end))
        else:
            self._end()

    async def _drain(self, then: Callable[[], None]) -> None:
        try:
            await self.engine.drain_tasks(StopReason.STOPPED, self.drain_seconds)
        finally:
            then()

    def _end(self) -> None:
        self._stopping = True
        self._inbox.put_nowait(None)

    @property
    def stop_reason(self) -> StopReason:
        """Why the run ends (or would end now): asked, the coordinator gone, or failed."""
        if self.stop_asked:
            return StopReason.STOPPED
        return StopReason.COORDINATOR_LOST if self.closed_by_coordinator else StopReason.FAILED

    def _kick(self) -> None:
        """The engine's wakeup: outside-world code queued something to send."""
        if not self._kicked:
            self._kicked = True
            self._inbox.put_nowait(_KICK)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        eng = self.engine
        eng.attach(loop, self._kick)  # handlers run on this loop's thread
        # The receive port first, then the send port (the coordinator expects this order).
        _, writer = await connect_with_retry(self.host, self.receive_port, self.connect_timeout)
        self._writer = writer
        writer.transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        reader, send_writer = await connect_with_retry(self.host, self.send_port,
                                                       self.connect_timeout)
        self.log.info("connected to the coordinator (receive port %d, send port %d)",
                      self.receive_port, self.send_port)
        read_task = loop.create_task(self._read_loop(reader))
        try:
            await self._main_loop()
        except ConnectionError:
            # The coordinator went away while we wrote to it (it stopped, or died): the
            # same end as its closing the connection while we read.
            self.closed_by_coordinator = True
        finally:
            for task in (read_task, self._draining):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            await eng.stop_tasks(self.stop_reason)
            for w in (writer, send_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                await self._room.acquire()
                data = await reader.read(_CHUNK)
                self._inbox.put_nowait(data)
                if not data:
                    return
        except (ConnectionError, OSError):
            self._inbox.put_nowait(b"")

    async def _main_loop(self) -> None:
        eng = self.engine
        while not self._stopping:
            data = await self._inbox.get()
            if data is None:
                break
            if data is _KICK:
                self._kicked = False  # a wake-up from now on is a new one
            else:
                self._room.release()
                if not data:
                    # Whoever started the runner says what that means (a stop, an error,
                    # the end of a debug replay).
                    self.closed_by_coordinator = True
                    break
                eng.receive_data(data)
            await self._pump()

    async def _write(self, data: bytes) -> None:
        assert self._writer is not None
        self._writer.write(data)
        self.peak_write_buffer = max(self.peak_write_buffer,
                                     self._writer.transport.get_write_buffer_size())
        await self._writer.drain()

    async def _pump(self) -> None:
        """Write everything the engine has to send now."""
        eng = self.engine
        while (out := eng.next_output()) is not None:
            if isinstance(out, SendCheckpoint):
                for chunk in out.chunks(_CHUNK):
                    await self._write(chunk)
            else:
                await self._write(out.data)
        # Once per chunk read, not per record: replay's hot loop stays as it was.
        if self.progress or self.log.isEnabledFor(logging.INFO):
            self._report_progress()

    def _report_progress(self) -> None:
        conn = self.engine.conn
        now = time.monotonic()
        if not conn.is_replaying:
            if self._drew_progress:  # the bar's line ends when the replay does
                sys.stderr.write("\n")
                sys.stderr.flush()
                self._drew_progress = False
            return
        if now - self._last_progress < (_DRAW_EVERY if self.progress else _LOG_EVERY):
            return
        self._last_progress = now
        line = progress_line(conn.messages_replayed, self.replay_estimate)
        if self.progress:
            sys.stderr.write(f"\r{line} ")
            sys.stderr.flush()
            self._drew_progress = True
        else:
            self.log.info("%s", line)
