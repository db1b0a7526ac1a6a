"""What the engine runs handlers with: the logged input being handled (where ``now()`` and
``random()`` come from) and a handler's coroutine while it is suspended on an ``await``."""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["CurrentInput", "Task"]


class CurrentInput:
    """The logged input being handled: where ``now()`` and ``random()`` come from."""

    __slots__ = ("_rng", "entropy", "timestamp_ns")

    def __init__(self, timestamp_ns: int, entropy: int) -> None:
        self.timestamp_ns = timestamp_ns
        self.entropy = entropy
        self._rng: random.Random | None = None

    def __repr__(self) -> str:
        return f"CurrentInput(timestamp_ns={self.timestamp_ns}, entropy={self.entropy})"

    @property
    def rng(self) -> random.Random:
        # Seeded on first use: seeding costs more than dispatching a small handler, and
        # most inputs never ask. The sequence is the same whenever it starts.
        if self._rng is None:
            self._rng = random.Random(self.entropy)
        return self._rng

    def derive(self) -> tuple[int, int]:
        """Header for an RPC sent while handling this input: a function of this input."""
        rng = self._rng
        if rng is None:
            rng = self._rng = random.Random(self.entropy)
        return self.timestamp_ns, rng.getrandbits(63)


class Task:
    """A handler's coroutine, its name (for messages) and what to do with its outcome."""

    __slots__ = ("coro", "name", "on_done")

    def __init__(self, coro: Coroutine[Any, Any, Any], name: str,
                 on_done: Callable[[Any, BaseException | None], None]) -> None:
        self.coro = coro
        self.name = name
        self.on_done = on_done
