"""Handlers' coroutines, stepped by hand, and the table of calls they await.

A handler may only await calls to immortals (``PendingCall``); it resumes synchronously
while the input that carries the call's result is being handled, so every step is a
function of the log. No asyncio here: asyncio would resume it on a later loop turn.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from types import CoroutineType
from typing import Any

from ambrosia_core.errors import AmbrosiaError, LocalProtocolError

from ..methods import PendingCall
from .handling import Task
from .replaylog import ReplayAwareLogger

__all__ = ["Done", "Handlers"]

Done = Callable[[Any, BaseException | None], None]  # what to do with a handler's outcome


class Handlers:
    """The suspended handlers and the calls they wait for.

    Attributes:
        pending: every call sent and not yet answered, by call id.
        waiters: the handlers suspended on each call id.
        suspended: how many handlers are suspended.
    """

    def __init__(self, user_log: ReplayAwareLogger) -> None:
        self.user_log = user_log
        self.pending: dict[int, PendingCall[Any]] = {}
        self.waiters: dict[int, list[Task]] = {}
        self.suspended = 0

    def start(self, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
              name: str, on_done: Done) -> None:
        """Run a handler up to its first await (or to its end)."""
        try:
            result = func(*args, **kwargs)
        except Exception as e:
            on_done(None, e)
            return
        self.returned(result, name, on_done)

    def returned(self, result: Any, name: str, on_done: Done) -> None:
        """A handler returned ``result``: a coroutine runs up to its first await (or to
        its end); anything else is its outcome."""
        if isinstance(result, CoroutineType):  # inspect.iscoroutine, without its call
            self._step(Task(result, name, on_done))
        else:
            on_done(result, None)

    def _step(self, task: Task) -> None:
        try:
            awaited = task.coro.send(None)
        except StopIteration as stop:
            task.on_done(stop.value, None)
            return
        except Exception as e:
            task.on_done(None, e)
            return
        if not isinstance(awaited, PendingCall):
            task.coro.close()
            task.on_done(None, LocalProtocolError(
                f"{task.name} awaited {awaited!r}: handlers may only await calls to immortals "
                "(run other asyncio work with ctx.spawn() when primary and feed its results "
                "back as Impulses)"))
            return
        self.suspended += 1
        self.waiters.setdefault(awaited.call_id, []).append(task)

    def add(self, call: PendingCall[Any]) -> None:
        self.pending[call.call_id] = call

    def take(self, call_id: int) -> PendingCall[Any] | None:
        """The pending call ``call_id``, no longer pending (None if it was not)."""
        return self.pending.pop(call_id, None)

    def resume(self, call: PendingCall[Any]) -> None:
        """Step every handler awaiting ``call`` (resolved by now)."""
        for task in self.waiters.pop(call.call_id, []):
            self.suspended -= 1
            self._step(task)

    def suspended_names(self) -> str:
        return ", ".join(f"{t.name} awaiting {self.pending[cid].method} (call {cid})"
                         for cid in sorted(self.waiters) for t in self.waiters[cid])

    def abandon_oldest(self, error_for: Callable[[str], BaseException]) -> None:
        """Fail the suspended awaits, oldest first, until no handler is suspended."""
        for call_id in sorted(self.waiters):
            if self.suspended == 0:
                break
            if call_id not in self.waiters:
                continue  # an earlier failure's handler resolved it meanwhile
            pc = self.pending.pop(call_id)
            pc.resolve(error=error_for(f"{pc.method} (call {call_id})"))
            self.resume(pc)

    def log_failure(self, value: Any, error: BaseException | None) -> None:
        """The outcome handler of inputs nobody waits for: a failure is logged."""
        if error is None:
            return
        if isinstance(error, AmbrosiaError):
            self.user_log.error("handler failed: %s", error)
        else:
            self.user_log.error("handler failed: %s", "".join(
                traceback.format_exception(error)).rstrip())
