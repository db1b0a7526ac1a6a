"""Immortals used by the framework tests (module level, so `ambrosia run` can import them)."""

from __future__ import annotations

import threading
import time

import attrs

from ambrosia_py import Immortal, ImpulseDuringRecoveryError, fork, impulse, rpc


@attrs.define
class Entry:
    n: int
    note: str = ""


class Calculator(Immortal):
    """A callee with typed arguments (an attrs class) and a registered error type."""

    remote_errors = (ZeroDivisionError,)

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    @rpc
    async def divide(self, a: int, b: int) -> float:
        return a / b

    @rpc
    async def store(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        return Entry(entry.n * 2, entry.note.upper())

    @rpc
    async def fail(self, message: str) -> None:
        raise KeyError(message)


class Caller(Immortal):
    """Awaits a Calculator ("calc") from its first start; survives crashes while waiting."""

    def __init__(self) -> None:
        self.results: list[object] = []

    async def on_first_start(self) -> None:
        calc = self.immortal("calc", Calculator)
        self.ctx.log.info("caller: awaiting calc")
        self.results.append(await calc.divide(7, 2))
        try:
            await calc.divide(1, 0)
        except ZeroDivisionError as e:
            self.results.append(f"ZeroDivisionError: {e}")
        stored = await calc.store(Entry(21, "hi"))
        self.results.append([stored.n, stored.note])
        try:
            await calc.fail("nope")
        except Exception as e:
            self.results.append(type(e).__name__)
        self.ctx.log.info("caller: done %s", self.results)


class Clocked(Immortal):
    """Uses the replay-safe clock and PRNG: a repro reproduces its state and outputs."""

    def __init__(self) -> None:
        self.samples: list[list[float]] = []

    def on_first_start(self) -> None:
        self.self_proxy.sample(3)

    @fork
    def sample(self, left: int) -> None:
        self.samples.append([self.ctx.now().timestamp(), self.ctx.random()])
        self.ctx.log.info("sampled %d", len(self.samples))
        if left > 1:
            self.self_proxy.sample(left - 1)


class Nondeterministic(Immortal):
    """Reads the real clock inside a handler: its replay diverges from the recorded run."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_first_start(self) -> None:
        self.self_proxy.tick(3)

    @fork
    def tick(self, left: int, stamp: int = 0) -> None:
        self.seen.append(left)
        self.ctx.log.info("tick %d", left)
        if left > 1:
            self.self_proxy.tick.fork(left - 1, stamp=time.time_ns())  # wrong: not ctx.now()


class Pulsed(Immortal):
    """Outside-world code (a thread started when primary) feeds Impulses back; an Impulse
    attempted during recovery is refused."""

    def __init__(self) -> None:
        self.pulses: list[int] = []

    def on_checkpoint_loaded(self) -> None:
        try:
            self.impulse_self.pulse(-1)
        except ImpulseDuringRecoveryError as e:
            self.ctx.log.info("impulse refused during recovery: %s", e)

    def on_become_primary(self) -> None:
        start = len(self.pulses)

        def outside_world() -> None:
            for i in range(start, start + 3):
                self.impulse_self.pulse(i)

        threading.Thread(target=outside_world, daemon=True).start()

    @impulse
    def pulse(self, n: int) -> None:
        self.pulses.append(n)
        self.ctx.log.info("pulse %d (total %d)", n, len(self.pulses))
