"""When a failed record processor starts again, and what of its failures reaches the log,
without I/O: the driver passes in the clock and the child's stderr lines, and logs what
comes back.

A streak is the failures of children none of which stayed up ``STABLE_SECONDS``. Within
one, the pause before the next start doubles from 0.1 s up to ``restart_max_seconds``,
and only the first failure (and one with another reason) is said in full, with the
child's stderr; a restarted child's stderr is held meanwhile, and given up when it fails
the same way again, which is said as one line with a count (at the 2nd, 10th, 100th, ...
failure). A child that stays up ``STABLE_SECONDS``, or ends well, ends the streak and gets
its held lines logged. The pauses are the driver's declared retry's (an ``Attempts``):
what resets its back-off is said here, as the streak's end.
"""

from __future__ import annotations

import enum

import attrs

from ambrosia_core.loops import said_at
from ambrosia_core.retry import Attempts, Retry

__all__ = ["HELD_MAX_CHARS", "STABLE_SECONDS", "ChildFailedError", "Failure", "Restarts", "Said",
           "restart_retry"]

STABLE_SECONDS = 10.0
"""A child up this long was working, so its next failure starts a new streak at 0.1 s;
one that dies sooner (e.g. after each batch) keeps doubling its pause instead."""

HELD_MAX_CHARS = 1 << 20
"""The most of a restarted child's stderr held while it may be failing again: beyond it the
child is saying more than a repeated crash, and what it says is logged as it comes."""


class ChildFailedError(Exception):
    """The child cannot go on: it exited, broke the protocol, or stopped answering."""


def restart_retry(cap: float) -> Retry:
    """A failed child is started again from 0.1 s doubling up to ``cap``
    (``restart_max_seconds``); only its failures are retried."""
    return Retry(floor=0.1, cap=cap, on=(ChildFailedError,))


class Said(enum.Enum):
    """How a failure is said."""

    FULL = "full"  # the first of a streak, or another reason: a warning and its stderr
    AGAIN = "again"  # the same again: one line with the count
    COUNTED = "counted"  # the same again: counted only (in the status)


@attrs.frozen
class Failure:
    """The verdict on one failure: wait ``pause`` seconds, then start again.

    Attributes:
        pause: seconds until the next start.
        count: failures in the streak, this one included.
        since: the wall-clock time of the streak's first failure.
        said: how it is said.
        stderr: held stderr lines to log now (said in full only).
    """

    pause: float
    count: int
    since: float
    said: Said
    stderr: tuple[str, ...] = ()


class Restarts:
    """One processor's restarts.

    Args:
        attempts: the child's starts, under the driver's declared retry (its floor is
            the first pause, its cap ``restart_max_seconds``); the streak is its
            failures in a row.
    """

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts
        self.last_failure = ""
        self.since = 0.0
        self._up_at = 0.0
        self._holding = False
        self._held: list[str] = []
        self._held_chars = 0

    @property
    def failures(self) -> int:
        """Failures in the streak."""
        return self.attempts.failures

    @property
    def holding(self) -> bool:
        """Whether the running child's stderr is held (it was started within a streak)."""
        return self._holding

    def started(self, now: float) -> None:
        """A child starts (``now`` on a monotonic clock): held if in a streak."""
        self._up_at = now
        self._holding = self.failures > 0
        self._held, self._held_chars = [], 0

    def stderr(self, line: str) -> list[str]:
        """A line of the child's stderr: the lines to log now (none while held)."""
        if not self._holding:
            return [line]
        self._held.append(line)
        self._held_chars += len(line)
        if self._held_chars > HELD_MAX_CHARS:
            return self.release()
        return []

    def release(self) -> list[str]:
        """Stop holding this child's stderr: the held lines, to log now."""
        held, self._held, self._held_chars = self._held, [], 0
        self._holding = False
        return held

    def check_up(self, now: float) -> list[str]:
        """Called at least once ``STABLE_SECONDS`` after a start: once the child has stayed
        up that long, the streak ends (the held lines come back, to log)."""
        if now - self._up_at < STABLE_SECONDS:
            return []
        self._new_streak()
        return self.release()

    def ended(self) -> list[str]:
        """The child ended well (the stream ended, or the instance stops): the streak ends."""
        self._new_streak()
        return self.release()

    def failed(self, now: float, wall: float, reason: str) -> Failure:
        """The child failed (``now`` monotonic, ``wall`` the time of day) for ``reason``."""
        if now - self._up_at >= STABLE_SECONDS:
            self._new_streak()
        pause = self.attempts.next_wait()  # counts the failure
        if self.failures == 1:
            self.since = wall
        new = self.failures == 1 or reason != self.last_failure
        self.last_failure = reason
        held = self.release()
        if new:
            said, out = Said.FULL, tuple(held)
        else:
            said = Said.AGAIN if self.failures == 2 or said_at(self.failures) else Said.COUNTED
            out = ()
        return Failure(pause, self.failures, self.since, said, out)

    def _new_streak(self) -> None:
        self.attempts.progress()
