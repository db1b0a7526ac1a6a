"""The only place with sockets: connects an ``Engine`` to its coordinator's two ports.

Plain I/O, as with any sans-IO session, done in the callbacks of the loop: the send
port is read by a protocol whose ``data_received`` hands the bytes to
``Engine.receive_data`` and, in the same callback, writes what ``Engine.next_output``
returns. An awaited call's result thus resumes its handler, and what the handler sends
goes out, in the one loop turn that read the result (a reader task and a queue between
them cost two more turns per message, most of a binding's time in a round trip).

Back-pressure keeps its bounds: when the receive port's write buffer passes its high
water mark (a slow coordinator), or a checkpoint is to be streamed, the callback stops
reading the send port and a task takes over, waiting on ``drain()`` between writes, and
reads again once everything is written. Impulses from outside-world threads are bounded
too: past ``IMPULSE_QUEUE_LIMIT`` queued bytes the sending thread waits (see ``outbox``),
so a coordinator that stops reading stops the producers instead of filling memory.

The engine's ``wakeup`` (something was queued by another thread) runs the same pump; one
that comes while the pump runs makes it go round once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AmbrosiaError, CoordinatorError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.retry import Attempts, Retry
from ambrosia_core.superseded import SUPERSEDED
from ambrosia_py.errors import SideEffectError

from ..stopping import StopReason
from .engine import Engine, SendCheckpoint
from .progress import ReplayProgress

__all__ = ["DRAIN_SECONDS", "ImmortalRunner", "connect_with_retry"]

_T = TypeVar("_T")

# Reads and checkpoint sends of up to 1 MiB: at 64 KiB a large checkpoint or a long replay
# paid a loop turn and a decoder call per 64 KiB.
_CHUNK = 1 << 20
_WRITE_HIGH_WATER = 1 << 20
DRAIN_SECONDS = 10.0  # the longest an ordinary stop waits for side effects to end


async def connect_with_retry(host: str, port: int, timeout: float
                             ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect, retrying while the coordinator starts (up to ``timeout`` seconds)."""
    return await _retrying(lambda: asyncio.open_connection(host, port, limit=_CHUNK),
                           host, port, timeout)


# A coordinator starting takes a moment: its ports are tried again from 20 ms, at most
# every 250 ms, until the runner's connect_timeout. One connect may take up to 2 s (a
# loopback connect answers at once, refused or accepted; one that hangs, its SYN dropped by
# a listener whose queue is full, is cut and tried again, so the runner gives up at its
# timeout instead of after the kernel's retries, minutes later).
_CONNECT_RETRY = Retry(floor=0.02, cap=0.25, on=(OSError,), timeout=2.0)


async def _retrying(connect: Callable[[], Awaitable[_T]], host: str, port: int,
                    timeout: float) -> _T:
    limit = min(timeout, _CONNECT_RETRY.timeout or timeout)
    attempts = Attempts(attrs.evolve(_CONNECT_RETRY, give_up_after=timeout, timeout=limit))
    try:
        return await attempts.run(connect)
    except OSError as e:
        raise CoordinatorError(
            f"cannot connect to the coordinator at {Address(host, port)}: {e.strerror or e}"
        ) from None


NOTICE_WAIT = 2.0  # seconds a closed coordinator's notice may lag its close


async def _read_notice(notices: asyncio.StreamReader) -> bool:
    """Whether the coordinator, as it closed, wrote the superseded notice on the receive
    connection (where it writes nothing otherwise: a stop or a death ends it empty)."""
    try:
        got = await asyncio.wait_for(notices.readexactly(len(SUPERSEDED)), NOTICE_WAIT)
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    return got == SUPERSEDED


class _SendPort(asyncio.BufferedProtocol):
    """The coordinator's send port, read into one buffer and handed to the runner in the
    callback that read it."""

    def __init__(self, runner: ImmortalRunner) -> None:
        self._runner = runner
        self._buf = memoryview(bytearray(_CHUNK))
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        self._runner._received(self._buf[:nbytes])

    def eof_received(self) -> bool:
        self._runner._closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._runner._closed()


class ImmortalRunner:
    """Runs an engine against a coordinator until it closes the connection or ``stop()``.

    Args:
        engine: the engine (immortal class and instance name).
        receive_port: the coordinator's receive port (binding -> coordinator).
        send_port: the coordinator's send port (coordinator -> binding).
        progress: draw the replay's progress on stderr (default: when it is a terminal);
            otherwise it goes to the log, at INFO, every few seconds (``progress``).
        replay_estimate: about how many records the recovery will replay, if known (then
            the progress has a share done and the time left, not just a count and a
            rate).
        drain_seconds: how long an ordinary stop waits for the side effects to end
            while their Impulses are still logged.
    """

    def __init__(self, engine: Engine, receive_port: int, send_port: int, *,
                 host: str = "127.0.0.1", connect_timeout: float = 15.0,
                 progress: bool | None = None, replay_estimate: int | None = None,
                 drain_seconds: float = DRAIN_SECONDS,
                 on_failure: Callable[[], Awaitable[None]] | None = None) -> None:
        self.engine = engine
        self.receive_port = receive_port
        self.send_port = send_port
        self.host = host
        self.connect_timeout = connect_timeout
        self.log = engine.log
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.closed_by_coordinator = False
        # The coordinator closed because a newer primary superseded its replica: the
        # immortal must start over (``ambrosia_core.superseded``).
        self.superseded = False
        self.stop_asked = False  # stop() was called
        self.drain_seconds = drain_seconds
        self.on_failure = on_failure
        self._draining: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._port = _SendPort(self)
        # Set once the run ends: None, or the error the engine raised.
        self._ended: asyncio.Future[None] | None = None
        self._slow: asyncio.Task[None] | None = None  # writes waiting on drain()
        self._pumping = False
        self._again = False  # a wake-up came while the pump ran
        self._eof = False  # the coordinator closed the send port
        self.replay_estimate = replay_estimate
        self._replay = ReplayProgress(replay_estimate, self.log, terminal=self.progress)
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

    def _end(self, error: BaseException | None = None) -> None:
        ended = self._ended
        if ended is not None and not ended.done():
            if error is None:
                ended.set_result(None)
            else:
                ended.set_exception(error)

    def _side_effect_failed(self, error: BaseException) -> None:
        """A side effect's error ends the instance, in one line naming it (its traceback
        at DEBUG level): as an error of a handler would, never a task left dead."""
        self.log.debug("the failed side effect's traceback", exc_info=error)
        what = str(error) if isinstance(error, AmbrosiaError) else (
            f"{type(error).__name__}: {' '.join(str(error).split())}")
        self._end(SideEffectError(f"a side effect of {self.engine.instance_name} failed: "
                                  f"{what}"))

    @property
    def stop_reason(self) -> StopReason:
        """Why the run ends (or would end now): asked, the coordinator gone, or failed."""
        if self.stop_asked:
            return StopReason.STOPPED
        return StopReason.COORDINATOR_LOST if self.closed_by_coordinator else StopReason.FAILED

    def _kick(self) -> None:
        """The engine's wakeup: outside-world code queued something to send."""
        if self._pumping:
            self._again = True
        elif (self._slow is None and self._port.transport is not None
              and self._ended is not None and not self._ended.done()):
            self._pump()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        eng = self.engine
        self._ended = loop.create_future()
        # Handlers run on this loop's thread; a failed side effect ends the run.
        eng.attach(loop, self._kick, self._flush, self._side_effect_failed)
        # The receive port first, then the send port (the coordinator expects this order).
        notices, writer = await connect_with_retry(self.host, self.receive_port,
                                                   self.connect_timeout)
        self._writer = writer
        writer.transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        port = self._port
        try:
            await _retrying(lambda: loop.create_connection(lambda: port, self.host,
                                                           self.send_port),
                            self.host, self.send_port, self.connect_timeout)
            self.log.info("connected to the coordinator (receive port %d, send port %d)",
                          self.receive_port, self.send_port)
            await self._ended
        except ConnectionError:
            # The coordinator went away while we wrote to it (it stopped, or died): the
            # same end as its closing the connection while we read.
            self.closed_by_coordinator = True
        except Exception:
            # The immortal failed: whoever runs its coordinator may stop it first, while
            # the connection is still open (it then ends as stopped, not as abandoned).
            if self.on_failure is not None:
                with contextlib.suppress(Exception):
                    await self.on_failure()
            raise
        finally:
            self._ended.cancel()  # late callbacks do nothing
            for task in (self._slow, self._draining):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            await eng.stop_tasks(self.stop_reason)
            if port.transport is not None:
                port.transport.close()
            if self.closed_by_coordinator:
                self.superseded = await _read_notice(notices)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _received(self, data: memoryview) -> None:
        """Bytes from the send port, handled now unless the slow path has the engine."""
        if self._ended is None or self._ended.done():
            return
        try:
            self.engine.receive_data(data)
        except Exception as e:  # the run ends with it, as the engine raised it
            self._end(e)
            return
        if self._slow is None:
            self._pump()

    def _closed(self) -> None:
        # Whoever started the runner says what that means (a stop, an error, the end of a
        # debug replay). What came before it is handled first, as it was read first.
        self._eof = True
        if self._slow is None:
            self.closed_by_coordinator = True
            self._end()

    def _pump(self) -> None:
        """Write everything the engine has to send now, in this callback; hand over to
        ``_pump_slowly`` when a write must wait or a checkpoint is to be streamed."""
        eng = self.engine
        writer = self._writer
        assert writer is not None
        transport = writer.transport
        self._pumping = True
        try:
            while True:
                self._again = False
                while (out := eng.next_output()) is not None:
                    if isinstance(out, SendCheckpoint):
                        self._go_slow(out)
                        return
                    write_unless_closing(transport, out.data)
                    size = transport.get_write_buffer_size()
                    if size > self.peak_write_buffer:
                        self.peak_write_buffer = size
                    if size > _WRITE_HIGH_WATER or transport.is_closing():
                        self._go_slow(None)
                        return
                    if eng.settled:
                        break
                if not self._again:
                    break
        except Exception as e:  # the run ends with it, as the engine raised it
            self._end(e)
            return
        finally:
            self._pumping = False
        if not self._replay.done and (self.progress or self.log.isEnabledFor(logging.INFO)):
            self._report_progress()

    def _flush(self, data: bytes) -> None:
        """A long handler's RPCs so far, written while it runs (the slow path's drain,
        if the buffer passes its mark, comes once the handler is done)."""
        assert self._writer is not None
        transport = self._writer.transport
        if not transport.is_closing():
            transport.write(data)
            self.peak_write_buffer = max(self.peak_write_buffer,
                                         transport.get_write_buffer_size())

    def _go_slow(self, first: SendCheckpoint | None) -> None:
        assert self._port.transport is not None
        self._port.transport.pause_reading()
        self._slow = asyncio.get_running_loop().create_task(self._pump_slowly(first))

    async def _pump_slowly(self, first: SendCheckpoint | None) -> None:
        try:
            if first is not None:
                await self._stream(first)
            await self._write(b"")
            while (out := self.engine.next_output()) is not None:
                if isinstance(out, SendCheckpoint):
                    await self._stream(out)
                else:
                    await self._write(out.data)
        except Exception as e:  # ConnectionError included: run() says what it means
            self._end(e)
            return
        finally:
            self._slow = None
        if self._eof:
            self._closed()
            return
        assert self._port.transport is not None
        self._port.transport.resume_reading()
        self._pump()  # wake-ups that came meanwhile

    async def _stream(self, ckpt: SendCheckpoint) -> None:
        for chunk in ckpt.chunks(_CHUNK):
            await self._write(chunk)

    async def _write(self, data: bytes) -> None:
        assert self._writer is not None
        if data:
            write_unless_closing(self._writer, data)
        self.peak_write_buffer = max(self.peak_write_buffer,
                                     self._writer.transport.get_write_buffer_size())
        await self._writer.drain()

    def _report_progress(self) -> None:
        conn = self.engine.conn
        if conn.is_replaying:
            self._replay.update(conn.messages_replayed)
        else:
            self._replay.finish(conn.messages_replayed)  # the bar's line ends with it
