"""A side effect's retry and timeout, declared once rather than coded in each loop.

What Temporal declares on an activity (a retry policy, a start-to-close and a
schedule-to-close timeout), for the effects of this project: ``Retry`` says which errors
are tried again, the back-off between attempts (``Backoff``: from ``floor`` doubling to
``cap``), how long one attempt may run (``timeout``) and how long the attempts may go on
in all (``give_up_after``). ``Attempts`` runs an attempt under it until one returns; the
attempt itself says what resets the back-off (``progress()``: real progress, such as a
commit, not a mere connect). Time comes from a ``Clock``, so a test moves it by hand.
An effect with a rule of its own for the wait or for what is said of a failure (a first
abort sent again at once, a streak said once with a count) gives it as ``delay``. A
supervisor on a thread of its own runs the same attempts with ``run_blocking``.

This is the one module that holds a ``Backoff``: every retry in the shipped packages is
declared here, not coded in a loop of its own.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import attrs

from .loops import Backoff

__all__ = ["REAL_CLOCK", "AttemptTimeoutError", "Attempts", "Clock", "Retry"]

T = TypeVar("T")


class AttemptTimeoutError(TimeoutError):
    """An attempt ran past its ``Retry.timeout`` and was cancelled: a failure, retried
    whatever ``Retry.on`` names (raised once ``give_up_after`` has passed)."""


class Clock(Protocol):
    """Where attempts read and wait out time."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""


class _RealClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


REAL_CLOCK: Clock = _RealClock()


def _positive_or_none(_self: object, attribute: attrs.Attribute[float | None],
                      value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"a retry's {attribute.name} must be above 0 or None, got {value}")


@attrs.frozen
class Retry:
    """How an effect is tried again.

    Attributes:
        floor, cap: the back-off between attempts, in seconds (``Backoff``).
        on: the errors that are retried (an attempt's timeout always is); any other ends
            the attempts with it.
        timeout: the longest one attempt may run, in seconds (None: no limit); past it
            the attempt is cancelled and counts as a failure (``AttemptTimeoutError``).
        give_up_after: seconds from the first attempt after which a failure is raised
            rather than retried (None: retried for ever).
    """

    floor: float = 0.05
    cap: float = 5.0
    on: tuple[type[Exception], ...] = (OSError,)
    timeout: float | None = attrs.field(default=None, validator=_positive_or_none)
    give_up_after: float | None = attrs.field(default=None, validator=_positive_or_none)


class Attempts:
    """Runs attempts at one effect under its ``Retry``, and holds its back-off.

    Args:
        retry: the declared policy.
        clock: where time comes from (a test's own).
        rng: the back-off's jitter (a seeded one in tests).
        delay: decides the wait after a retried failure, given the error and these
            attempts (None: the back-off's next wait, ``next_wait()``); an effect with a
            rule of its own (a first abort sent again at once) says it here, and logs
            there.
    """

    def __init__(self, retry: Retry, *, clock: Clock = REAL_CLOCK,
                 rng: random.Random | None = None,
                 delay: Callable[[Exception, Attempts], float] | None = None) -> None:
        self.retry = retry
        self.clock = clock
        self.backoff = Backoff(retry.floor, retry.cap, rng)
        self._delay = delay
        #: Attempts started so far.
        self.started = 0

    def progress(self) -> None:
        """Real progress: the next failure waits ``floor`` again (what resets it is the
        effect's to say)."""
        self.backoff.progress()

    @property
    def failures(self) -> int:
        """Failures in a row since the last progress (counted by ``next_wait``)."""
        return self.backoff.failures

    @property
    def worth_saying(self) -> bool:
        """Whether the failure just counted deserves a log line: the first of a streak,
        then the 10th, 100th, ... (``said_at``)."""
        return self.backoff.worth_saying

    def next_wait(self) -> float:
        """One more failure in a row: the back-off's wait before the next attempt, in
        seconds (doubling from ``floor`` to ``cap``, jittered)."""
        return self.backoff.failed()

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Call ``attempt`` until it returns, waiting between failures as declared.

        Raises:
            Exception: an error ``Retry.on`` does not name, or a retried one (an attempt's
                timeout included) once ``give_up_after`` has passed.
        """
        first = self.clock.now()
        retried: tuple[type[Exception], ...] = (AttemptTimeoutError, *self.retry.on)
        while True:
            self.started += 1
            try:
                return await self._one(attempt)
            except retried as error:
                late = self.retry.give_up_after
                if late is not None and self.clock.now() - first >= late:
                    raise
                wait = self._wait(error)
            if wait > 0:
                await self.clock.sleep(wait)

    def run_blocking(self, attempt: Callable[[], T], stop: threading.Event) -> T | None:
        """``run`` for a thread of its own (a supervisor of a child process): call
        ``attempt`` until it returns, waiting between failures as declared, on real time;
        ``stop`` set ends the waits at once (None is returned). ``timeout`` is not
        applied: a blocking call cannot be cancelled from here.

        Raises:
            Exception: as ``run``.
        """
        first = time.monotonic()
        while not stop.is_set():
            self.started += 1
            try:
                return attempt()
            except self.retry.on as error:
                late = self.retry.give_up_after
                if late is not None and time.monotonic() - first >= late:
                    raise
                wait = self._wait(error)
            if stop.wait(wait):
                break
        return None

    def _wait(self, error: Exception) -> float:
        return self.next_wait() if self._delay is None else self._delay(error, self)

    async def _one(self, attempt: Callable[[], Awaitable[T]]) -> T:
        limit = self.retry.timeout
        if limit is None:
            return await attempt()
        task = asyncio.ensure_future(attempt())
        timer = asyncio.ensure_future(self.clock.sleep(limit))
        try:
            await asyncio.wait([task, timer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not task.done():
                task.cancel()
                # Its clean-up runs before the next attempt starts.
                await asyncio.wait([task])
        if task.cancelled() and timer.done() and not timer.cancelled():
            raise AttemptTimeoutError(f"the attempt ran past its timeout of {limit:g} s")
        return task.result()
