"""Long-lived side effects in one shape: which should run is a function of the state.

An immortal that keeps work going in the outside world (a link to each sink, a child
process per stream, the links to job runners) describes it in three parts:

- ``wanted``: a pure function of the immortal's state that names the effects that should
  be running now, each by a key with a spec (what it needs to run: a sink's address, a
  stream's processor configuration). It is asked again after every batch of inputs the
  instance applies, so an effect starts as soon as a handler decides it, and stops when a
  handler no longer wants it.
- an effect per key (``Effect``): ``run()`` is the side effect itself, and ``wake()`` says
  that the state changed, so that it looks at it again and acts (sends what the state
  decided). What it learns goes back to the state as Impulses, which it sends itself.
- ``Effects``, the driver: started on the primary with ``ctx.run_effects`` (never during
  replay, so never twice), it starts an effect for every key wanted and not running,
  cancels those no longer wanted or whose spec changed (each exactly once, and waits for
  it to finish its own clean-up), and wakes the running ones. An effect that fails ends
  the instance in one line, as any side effect's failure does; one that returns is done
  until its spec changes.

An effect that is tried again declares how, as an activity declares its retry policy and
timeouts: its ``attempts`` attribute, an ``ambrosia_core.retry.Attempts`` made from a
``Retry`` (the errors retried, the back-off's floor and cap, each attempt's timeout), and
``run()`` is then one attempt. The driver runs the attempts; the effect calls
``attempts.progress()`` on what resets its back-off. Only an error its ``Retry`` does not
take ends the instance.

A primary's own long-lived tasks (a timer that sends a tick Impulse, a status reporter, a
collector of files nothing needs) are effects too, wanted for the whole primary life:
``Chore`` makes one of a coroutine function (``every``: of a step taken every so many
seconds; ``woken``: of a step taken at its start and after each wake, such as sending
what the state decided), with its retry declared, and ``chores`` a driver that runs a fixed
set of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from ambrosia_core.retry import REAL_CLOCK, Attempts, Clock, Retry

__all__ = ["Chore", "Effect", "Effects", "chores", "every", "woken"]

K = TypeVar("K", bound=Hashable)
S = TypeVar("S")


class Effect(Protocol):
    """One long-lived side effect, run on the primary while its key is wanted (with an
    ``attempts`` attribute, an ``Attempts``: retried as it declares)."""

    async def run(self) -> None:
        """The effect itself, or one attempt at it; cancelled when it is no longer wanted
        or the instance stops."""

    def wake(self) -> None:
        """The state changed: look at it again (called on the event loop's thread)."""


class Effects(Generic[K, S]):
    """Runs the effects that ``wanted()`` names, one per key.

    Args:
        wanted: the effects that should run, by key, each with its spec; a pure function
            of the state (it is called on the primary after inputs were applied).
        start: makes the effect for a key and its spec (not yet running).
    """

    def __init__(self, wanted: Callable[[], Mapping[K, S]],
                 start: Callable[[K, S], Effect]) -> None:
        self._wanted = wanted
        self._start = start
        #: The effects running (or done), by key.
        self.effects: dict[K, Effect] = {}
        self._specs: dict[K, S] = {}
        self._tasks: dict[K, asyncio.Task[Any]] = {}
        self._stopping: set[asyncio.Task[Any]] = set()  # cancelled, finishing their clean-up
        self._changed: asyncio.Event | None = None

    def wake(self) -> None:
        """The state may have changed: ask ``wanted`` again and wake every effect."""
        if self._changed is not None:
            self._changed.set()

    async def run(self) -> None:
        """Reconcile until cancelled (the instance stops); then cancel every effect.

        Raises:
            Exception: what an effect failed with (the instance stops with it).
        """
        self._changed = changed = asyncio.Event()
        try:
            while True:
                changed.clear()
                self._reconcile()
                for effect in self.effects.values():
                    effect.wake()
                waiting = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait([waiting, *self._tasks.values(), *self._stopping],
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiting.cancel()
                self._reap()
        finally:
            tasks = [*self._tasks.values(), *self._stopping]
            self._tasks.clear()
            self._stopping.clear()
            for task in tasks:
                task.cancel()
            if tasks:
                # Not awaited one by one: a second cancel of this task must not reach
                # them (each is cancelled exactly once, its clean-up undisturbed).
                await asyncio.wait(tasks)

    def _reconcile(self) -> None:
        wanted = dict(self._wanted())
        for key in [k for k, spec in self._specs.items()
                    if k not in wanted or wanted[k] != spec]:
            task = self._tasks.pop(key, None)
            if task is not None:
                task.cancel()  # exactly once; its clean-up runs undisturbed
                self._stopping.add(task)
            del self._specs[key]
            del self.effects[key]
        for key, spec in wanted.items():
            if key not in self._specs:
                effect = self._start(key, spec)
                self._specs[key] = spec
                self.effects[key] = effect
                task = asyncio.ensure_future(_attempted(effect))
                task.add_done_callback(_retrieved)
                self._tasks[key] = task

    def _reap(self) -> None:
        """An effect that failed ends the driver (and the instance); one that returned is
        done: its key stays, so it is not started again with the same spec."""
        ended = [t for t in self._stopping if t.done()]
        self._stopping.difference_update(ended)
        for key, task in list(self._tasks.items()):
            if task.done():
                del self._tasks[key]
                ended.append(task)
        for task in ended:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error


def _attempted(effect: Effect) -> Awaitable[None]:
    """The effect's run, under the retry it declares (if any)."""
    attempts = getattr(effect, "attempts", None)
    return attempts.run(effect.run) if isinstance(attempts, Attempts) else effect.run()


def _retrieved(task: asyncio.Task[Any]) -> None:
    """An effect's failure is raised by the driver while it runs (``_reap``); one that
    comes while the instance stops (an Impulse refused by a stopped immortal, say) is
    a consequence of the stop, not news: it is marked retrieved, so that asyncio does
    not print it as a traceback when the task is collected."""
    if not task.cancelled():
        task.exception()


class Chore:
    """A primary's own long-lived task as an effect.

    Args:
        body: the task (one attempt at it, under ``retry``); it runs until cancelled, or
            returns when it is done.
        retry: how it is tried again (None: its failure ends the instance).
        delay: the retry's own rule for the wait and what is said (``Attempts``).
        on_wake: called at each ``wake`` (the state changed).
        clock: where the retry's waits come from (a test's own).
    """

    def __init__(self, body: Callable[[], Awaitable[None]], *, retry: Retry | None = None,
                 delay: Callable[[Exception, Attempts], float] | None = None,
                 on_wake: Callable[[], None] | None = None,
                 clock: Clock = REAL_CLOCK) -> None:
        self._body = body
        self._on_wake = on_wake
        if retry is not None:
            self.attempts = Attempts(retry, delay=delay, clock=clock)

    async def run(self) -> None:
        await self._body()

    def wake(self) -> None:
        if self._on_wake is not None:
            self._on_wake()


def every(seconds: float, step: Callable[[], object], *, retry: Retry | None = None,
          delay: Callable[[Exception, Attempts], float] | None = None,
          clock: Clock = REAL_CLOCK) -> Chore:
    """A chore that waits ``seconds``, then calls ``step`` (awaited if it returns an
    awaitable), for ever: a timer that sends a tick, a status written every few seconds.
    What ``step`` raises is its failure: retried as ``retry`` declares (the waits start
    again after the back-off), or the end of the instance."""
    async def body() -> None:
        while True:
            await clock.sleep(seconds)
            out = step()
            if isinstance(out, Awaitable):
                await out

    return Chore(body, retry=retry, delay=delay, clock=clock)


def woken(step: Callable[[], object]) -> Chore:
    """A chore that takes ``step`` when it starts and again after each ``wake`` (the
    state changed): the effect that sends what the handlers decided. Wakes that come
    while ``step`` runs, or before it runs again, are taken by one step."""
    changed = asyncio.Event()

    async def body() -> None:
        while True:
            changed.clear()
            step()
            await changed.wait()

    return Chore(body, on_wake=changed.set)


def chores(named: Mapping[str, Effect]) -> Effects[str, None]:
    """A driver for effects wanted for the whole primary life, by name: each is started
    once (with its retry), every one is woken when the state changes, and all are
    cancelled when the primary stops."""
    return Effects(lambda: dict.fromkeys(named), lambda name, _spec: named[name])
