"""The one shape of long-lived side effects: the driver runs exactly what a function of
the state wants, one effect per key, and nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ambrosia_core.retry import Retry
from ambrosia_py.effects import Chore, Effects, chores, every, woken


class Probe:
    """An effect that records its life: started, woken, cancelled, cleaned up."""

    def __init__(self, key: str, spec: Any, log: list[str], fail: bool = False) -> None:
        self.key, self.spec, self.log, self.fail = key, spec, log, fail
        self.wakes = 0

    async def run(self) -> None:
        self.log.append(f"start {self.key}={self.spec}")
        try:
            if self.fail:
                raise RuntimeError(f"{self.key} broke")
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # its clean-up may await and is not disturbed
            self.log.append(f"stopped {self.key}")
            raise

    def wake(self) -> None:
        self.wakes += 1


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_effects_follow_what_the_state_wants() -> None:
    async def main() -> None:
        state: dict[str, Any] = {"a": 1, "b": 1}
        log: list[str] = []
        effects: Effects[str, Any] = Effects(lambda: dict(state),
                                             lambda k, s: Probe(k, s, log))
        task = asyncio.ensure_future(effects.run())
        await _settle()
        assert sorted(log) == ["start a=1", "start b=1"]
        a = effects.effects["a"]
        assert isinstance(a, Probe) and a.wakes == 1
        # Nothing changed: woken again, nothing started or stopped.
        effects.wake()
        await _settle()
        assert len(log) == 2 and a.wakes == 2
        # b's spec changes, c is wanted, a is not any more.
        del state["a"]
        state["b"], state["c"] = 2, 1
        effects.wake()
        await _settle()
        assert sorted(log[2:]) == ["start b=2", "start c=1", "stopped a", "stopped b"]
        assert sorted(effects.effects) == ["b", "c"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sorted(log[6:]) == ["stopped b", "stopped c"]  # each cancelled once

    asyncio.run(main())


def test_an_effect_that_fails_ends_the_driver_with_its_error() -> None:
    async def main() -> None:
        log: list[str] = []
        effects: Effects[str, int] = Effects(
            lambda: {"ok": 1, "bad": 1}, lambda k, s: Probe(k, s, log, fail=k == "bad"))
        with pytest.raises(RuntimeError, match="bad broke"):
            await asyncio.wait_for(effects.run(), 5)
        assert "stopped ok" in log  # the others are stopped too

    asyncio.run(main())


def test_an_effect_that_returns_is_not_started_again_with_the_same_spec() -> None:
    async def main() -> None:
        runs: list[int] = []
        spec = {"once": 1}

        class Once:
            def __init__(self, s: int) -> None:
                self.s = s

            async def run(self) -> None:
                runs.append(self.s)

            def wake(self) -> None:
                pass

        effects: Effects[str, int] = Effects(lambda: dict(spec), lambda k, s: Once(s))
        task = asyncio.ensure_future(effects.run())
        await _settle()
        effects.wake()
        await _settle()
        assert runs == [1]
        spec["once"] = 2
        effects.wake()
        await _settle()
        assert runs == [1, 2]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_an_effect_failing_as_the_instance_stops_leaves_no_stray_traceback() -> None:
    """A stop cancels the driver (a stop's timeout may cancel it twice), and an effect may
    fail as it goes (an Impulse the stopped immortal refuses): a consequence of the stop,
    never a traceback that asyncio prints when the task is collected."""
    import gc

    async def main() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: seen.append(ctx))

        class Refused:
            async def run(self) -> None:
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    await asyncio.sleep(0)
                    raise RuntimeError("the immortal has stopped") from None

            def wake(self) -> None:
                pass

        effects: Effects[str, int] = Effects(lambda: {"x": 1}, lambda k, s: Refused())
        task = asyncio.ensure_future(effects.run())
        await _settle()
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        del effects, task
        await _settle()
        gc.collect()
        await _settle()
        return seen

    assert asyncio.run(main()) == []


class Clock:
    """Time that moves only by the sleeps asked of it, each recorded."""

    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)
        self.slept.append(seconds)
        self.t += seconds


def test_a_chore_every_few_seconds_is_retried_as_declared_and_goes_on() -> None:
    """A step that fails with an error its retry names waits the back-off and the timer
    goes on; one its retry does not name ends the driver, as any effect's failure."""
    clock = Clock()
    steps: list[float] = []

    def step() -> None:
        steps.append(clock.t)
        if len(steps) in (2, 3):
            raise OSError("the disk hiccups")
        if len(steps) == 5:
            raise ValueError("a bug")

    chore = every(1.0, step, retry=Retry(floor=0.5, cap=0.5, on=(OSError,)), clock=clock)
    driver = chores({"timer": chore})

    async def main() -> None:
        with pytest.raises(ValueError, match="a bug"):
            await asyncio.wait_for(driver.run(), 5)

    asyncio.run(main())
    # Waits of 1 s between steps; each failure adds a back-off of 0.25 to 0.5 s.
    assert len(steps) == 5 and clock.slept.count(1.0) == 5
    assert [s for s in clock.slept if s != 1.0] and all(
        0.25 <= s <= 0.5 for s in clock.slept if s != 1.0)
    assert len([s for s in clock.slept if s != 1.0]) == 2


def test_chores_run_each_once_wake_them_all_and_stop_them_with_the_driver() -> None:
    async def main() -> None:
        log: list[str] = []
        named = {"a": Probe("a", None, log), "b": Probe("b", None, log)}
        woken: list[int] = []
        named_all: dict[str, Any] = {**named, "c": Chore(asyncio.Event().wait,
                                                         on_wake=lambda: woken.append(1))}
        driver = chores(named_all)
        task = asyncio.ensure_future(driver.run())
        await _settle()
        driver.wake()
        await _settle()
        assert sorted(log) == ["start a=None", "start b=None"]
        assert named["a"].wakes == 2 and woken == [1, 1]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sorted(log[2:]) == ["stopped a", "stopped b"]

    asyncio.run(main())


def test_a_woken_chore_steps_at_its_start_and_once_for_the_wakes_before_it_looks_again() -> None:
    async def main() -> None:
        seen: list[int] = []
        state = {"n": 0}
        syncer = woken(lambda: seen.append(state["n"]))
        driver = chores({"syncer": syncer})
        task = asyncio.ensure_future(driver.run())
        await _settle()
        assert seen == [0]  # its start
        await _settle()
        assert seen == [0]  # nothing woke it: no step
        state["n"] = 1
        syncer.wake()
        syncer.wake()  # two wakes before it looks: one step sees both changes
        await _settle()
        assert seen == [0, 1]
        state["n"] = 2
        driver.wake()  # the driver's wake reaches it too (inputs were applied)
        await _settle()
        assert seen == [0, 1, 2]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        syncer.wake()  # after the stop: nothing runs
        await _settle()
        assert seen == [0, 1, 2]

    asyncio.run(main())
