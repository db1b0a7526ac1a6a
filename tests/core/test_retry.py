"""A declared retry is honoured: the waits between attempts are the declared back-off (read
off a clock the test owns, never slept), progress resets it, an error it does not name
ends the attempts at once, ``give_up_after`` raises the last failure, and an attempt past
its timeout is cancelled, its clean-up run, and tried again. Then the same through the
effects driver."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from ambrosia_core.retry import Attempts, AttemptTimeoutError, Retry
from ambrosia_py.effects import Effects


class Clock:
    """Time that moves only by the sleeps asked of it, each recorded."""

    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        # A few turns of the loop first, so a timer whose attempt ended first is cancelled
        # before it counts.
        for _ in range(8):
            await asyncio.sleep(0)
        self.slept.append(seconds)
        self.t += seconds


class Top:
    """Jitter that always draws the whole wait, so the waits are the declared ones."""

    def uniform(self, _low: float, high: float) -> float:
        return high


def attempts(retry: Retry, clock: Clock, **kw: Any) -> Attempts:
    return Attempts(retry, clock=clock, rng=Top(), **kw)  # type: ignore[arg-type]


def failing(times: int, error: Exception, then: Any = "done") -> Any:
    calls: list[float] = []

    async def attempt() -> Any:
        calls.append(0)
        if len(calls) <= times:
            raise error
        return then
    attempt.calls = calls  # type: ignore[attr-defined]
    return attempt


def test_the_waits_between_attempts_are_the_declared_back_off() -> None:
    clock = Clock()
    a = attempts(Retry(floor=0.1, cap=0.5), clock)
    assert asyncio.run(a.run(failing(5, OSError("refused")))) == "done"
    assert clock.slept == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert a.started == 6


def test_progress_resets_the_back_off_to_its_floor() -> None:
    clock = Clock()
    a = attempts(Retry(floor=0.1, cap=1.0), clock)
    n = 0

    async def attempt() -> str:
        nonlocal n
        n += 1
        if n == 4:
            a.progress()  # the effect's own word: a commit went through, say
        if n < 6:
            raise ConnectionResetError
        return "done"

    assert asyncio.run(a.run(attempt)) == "done"
    assert clock.slept == [0.1, 0.2, 0.4, 0.1, 0.2]


def test_an_error_the_retry_does_not_name_ends_the_attempts_at_once() -> None:
    clock = Clock()
    a = attempts(Retry(on=(OSError,)), clock)
    with pytest.raises(ValueError, match="bad spec"):
        asyncio.run(a.run(failing(1, ValueError("bad spec"))))
    assert (clock.slept, a.started) == ([], 1)


def test_give_up_after_raises_the_last_failure() -> None:
    clock = Clock()
    a = attempts(Retry(floor=0.25, cap=0.25, give_up_after=1.0), clock)
    with pytest.raises(ConnectionRefusedError):
        asyncio.run(a.run(failing(100, ConnectionRefusedError())))
    assert clock.slept == [0.25] * 4 and a.started == 5


def test_an_attempt_past_its_timeout_is_cancelled_and_tried_again() -> None:
    clock = Clock()
    a = attempts(Retry(floor=0.1, timeout=2.0, on=(KeyError,)), clock)
    cleaned: list[int] = []

    async def attempt() -> str:
        if a.started == 1:
            try:
                await asyncio.Event().wait()  # hangs
            finally:
                cleaned.append(a.started)
        return "done"

    assert asyncio.run(a.run(attempt)) == "done"
    # The timeout (2.0 s on the clock), then the back-off's floor; the hung attempt's
    # clean-up ran before the next attempt started.
    assert clock.slept[:2] == [2.0, 0.1] and cleaned == [1] and a.started == 2


def test_a_timeout_past_give_up_after_is_raised() -> None:
    clock = Clock()
    a = attempts(Retry(timeout=2.0, give_up_after=1.0), clock)

    async def hangs() -> None:
        await asyncio.Event().wait()

    with pytest.raises(AttemptTimeoutError, match="past its timeout of 2 s"):
        asyncio.run(a.run(hangs))


def test_a_delay_rule_of_the_effect_replaces_the_back_off() -> None:
    clock = Clock()
    seen: list[tuple[str, int]] = []

    def delay(error: Exception, tried: Attempts) -> float:
        seen.append((type(error).__name__, tried.failures))
        return 0.0 if isinstance(error, KeyError) else tried.next_wait()

    a = attempts(Retry(floor=0.1, on=(KeyError, OSError)), clock, delay=delay)
    errors = iter([KeyError("abort"), OSError("lost"), KeyError("abort")])

    async def attempt() -> str:
        for error in errors:
            raise error
        return "done"

    assert asyncio.run(a.run(attempt)) == "done"
    assert clock.slept == [0.1]
    assert seen == [("KeyError", 0), ("OSError", 0), ("KeyError", 1)]


def test_the_effects_driver_runs_an_effect_under_its_declared_retry() -> None:
    clock = Clock()

    class Flaky:
        def __init__(self) -> None:
            self.attempts = attempts(Retry(floor=0.5, cap=2.0), clock)
            self.runs = 0
            self.finished = asyncio.Event()

        async def run(self) -> None:
            self.runs += 1
            if self.runs < 4:
                raise OSError("not yet")
            self.finished.set()

        def wake(self) -> None:
            pass

    made: list[Flaky] = []

    def start(_key: str, _spec: int) -> Flaky:
        made.append(Flaky())
        return made[-1]

    async def main() -> None:
        driver: Effects[str, int] = Effects(lambda: {"a": 1}, start)
        task = asyncio.ensure_future(driver.run())
        while not task.done() and not (made and made[0].finished.is_set()):
            await asyncio.sleep(0)
        # An OSError, which the effect's retry takes, did not end the driver.
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert made[0].runs == 4 and clock.slept == [0.5, 1.0, 2.0]


def test_a_retry_refuses_a_timeout_that_is_no_time() -> None:
    with pytest.raises(ValueError, match="timeout must be above 0 or None, got 0"):
        Retry(timeout=0)


def test_run_blocking_waits_the_declared_back_off_and_a_stop_ends_the_wait() -> None:
    waits: list[float] = []

    class Stop(threading.Event):
        """Records each wait asked of it instead of waiting (set: the stop)."""

        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return len(waits) >= 4 or self.is_set()

    a = Attempts(Retry(floor=1.0, cap=4.0, on=(OSError,)), rng=Top())  # type: ignore[arg-type]
    calls = failing(2, OSError("no port"))
    assert a.run_blocking(lambda: asyncio.run(calls()), Stop()) == "done"
    assert waits == [1.0, 2.0] and a.started == 3
    # A stop asked during a wait ends the attempts without another.
    waits.clear()
    b = Attempts(Retry(floor=1.0, cap=4.0), rng=Top())  # type: ignore[arg-type]
    never = failing(100, OSError("no port"))
    assert b.run_blocking(lambda: asyncio.run(never()), Stop()) is None
    assert waits == [1.0, 2.0, 4.0, 4.0] and b.started == 4
    # An error the retry does not name is raised at once.
    with pytest.raises(ValueError, match="bad"):
        b.run_blocking(lambda: asyncio.run(failing(1, ValueError("bad"))()), Stop())


SHIPPED = [Path(__file__).resolve().parents[2] / p
           for p in ("ambrosia_core", "ambrosia_py", "ic-harness/ambrosia_ic", "ambrosia_cli",
                     "services/ambrosia_services")]


def test_every_retry_is_declared_no_loop_keeps_a_back_off_of_its_own() -> None:
    """``Backoff`` is defined in loops.py and held only by ``Attempts``: any other module
    that names it codes a retry of its own instead of declaring one."""
    naming = sorted(str(path.relative_to(SHIPPED[0].parent))
                    for root in SHIPPED for path in root.rglob("*.py")
                    if "Backoff" in path.read_text())
    assert naming == ["ambrosia_core/loops.py", "ambrosia_core/retry.py"]
