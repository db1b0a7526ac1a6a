"""What the engine has to send that no logged input produced: Impulses queued by
outside-world threads, checkpoint requests, and the side-effect tasks (``ctx.spawn``).

The only room of the engine that other threads touch. An outside-world thread queues an
Impulse under a lock and then calls ``wake`` so that whoever drives the engine (the
runner's loop, or a test) asks it for outputs again. Back-pressure: past
``IMPULSE_QUEUE_LIMIT`` queued bytes a thread other than the engine's waits until the
queue is taken, so a coordinator that stops reading stops the producers instead of
filling memory. Code on the engine's own thread cannot wait (it would stop the loop that
empties the queue); the runner's ``drain()`` bounds it instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from ambrosia_core.errors import LocalProtocolError
from ambrosia_core.wire import OutgoingRpc

__all__ = ["IMPULSE_QUEUE_LIMIT", "Outbox"]

IMPULSE_QUEUE_LIMIT = 1 << 20  # bytes of queued Impulses before outside-world threads wait


class Outbox:
    """The thread-safe queue of Impulses and raw messages, and the side-effect tasks.

    Attributes:
        loop: the event loop the engine runs on (side effects run there), once running.
        loop_thread: the thread that drives the engine (handlers run on it).
        wakeup: called on the engine's thread when there is something to take.
        peak_queued_bytes: the most Impulse bytes ever queued at once.
        blocked_senders: outside-world threads waiting for room now.
    """

    def __init__(self, record: list[OutgoingRpc] | None) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = threading.get_ident()
        self.wakeup: Callable[[], None] = lambda: None
        self.peak_queued_bytes = 0
        self.blocked_senders = 0
        self._record = record
        self._impulses: list[OutgoingRpc] = []
        self._raw: list[bytes] = []
        self._room = threading.Condition(threading.Lock())
        self._queued_bytes = 0
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Called after each run of inputs applied on the primary (``ctx.run_effects``).
        self.watchers: list[Callable[[], None]] = []
        self.watched_inputs = 0  # the inputs applied when they were last called
        self.failed: Callable[[BaseException], None] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop | None, wakeup: Callable[[], None],
               failed: Callable[[BaseException], None] | None = None) -> None:
        """Drive the engine from the calling thread; ``wakeup`` is called on it, and
        ``failed`` with the error of a side-effect task that ended with one."""
        self.loop = loop
        self.loop_thread = threading.get_ident()
        self.wakeup = wakeup
        self.failed = failed

    def on_engine_thread(self) -> bool:
        return threading.get_ident() == self.loop_thread

    def queue_impulse(self, rpc: OutgoingRpc) -> None:
        """Queue one Impulse (any thread); waits for room when called off the engine's."""
        size = len(rpc.args) + len(rpc.destination) + 16
        with self._room:
            if self.loop is not None and not self.on_engine_thread():
                self.blocked_senders += 1
                try:
                    self._room.wait_for(lambda: self._queued_bytes < IMPULSE_QUEUE_LIMIT
                                        or self._closed)
                finally:
                    self.blocked_senders -= 1
            if self._closed:
                raise LocalProtocolError("the immortal has stopped: the Impulse was not sent")
            self._queued_bytes += size
            self.peak_queued_bytes = max(self.peak_queued_bytes, self._queued_bytes)
            self._impulses.append(rpc)
            if self._record is not None:
                self._record.append(rpc)
        self.wake()

    def queue_raw(self, data: bytes) -> None:
        """Queue an encoded message (a checkpoint request), any thread."""
        with self._room:
            self._raw.append(data)
        self.wake()

    def take(self) -> tuple[list[OutgoingRpc], list[bytes]]:
        """Everything queued, emptying the queue and waking the waiting senders."""
        if not self._impulses and not self._raw:
            # Read without the lock, as the engine asks after every input: a sender that
            # queues just after this look calls ``wake`` next, so nothing waits unseen.
            return [], []
        with self._room:
            impulses, self._impulses = self._impulses, []
            raw, self._raw = self._raw, []
            self._queued_bytes = 0
            self._room.notify_all()
        return impulses, raw

    def wake(self) -> None:
        """Tell the engine's driver there is something to take (from any thread)."""
        loop = self.loop
        if loop is not None and not self.on_engine_thread():
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody to wake
                loop.call_soon_threadsafe(self.wakeup)
        else:
            self.wakeup()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        if self.loop is None:
            coro.close()
            raise LocalProtocolError(
                "side effects (ctx.spawn) may only start when primary, with a running runtime"
            )
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_ended)
        return task

    def _task_ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()  # retrieved here: never "exception was never retrieved"
        if error is not None and self.failed is not None:
            self.failed(error)

    async def cancel_tasks(self, timeout: float) -> None:
        """Cancel the side-effect tasks and wait up to ``timeout`` seconds for them to
        end; Impulses are still taken meanwhile."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def close(self) -> None:
        """Refuse further Impulses (waiting senders get an error) and cancel side effects."""
        with self._room:
            self._closed = True
            self._room.notify_all()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):  # cancelled side effects end here
                await t
