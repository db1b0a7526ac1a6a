"""Sweeps of seeded runs, as every world's tests run them: each seed's run counted, a
failing one failing the test with its explanation, and the first failing seed found (a
mutant's)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest

from .world import Seeded, SimFailure, explain_seed

__all__ = ["first_failing", "sweep"]


def sweep(of: Callable[[int], Seeded], first: int, n: int) -> collections.Counter[str]:
    """Run seeds ``first`` .. ``first + n - 1`` of scenarios ``of``; what they counted.
    A failing seed fails the test with what it did and a shortest run that still fails."""
    seen: collections.Counter[str] = collections.Counter()
    for seed in range(first, first + n):
        try:
            world: Any = of(seed).run()
        except SimFailure:
            pytest.fail(explain_seed(seed, of), pytrace=False)
        seen.update(world.counts)
    return seen


def first_failing(of: Callable[[int], Seeded], limit: int) -> int | None:
    """The first of seeds 0 .. ``limit - 1`` whose run fails (None: all pass)."""
    for seed in range(limit):
        try:
            of(seed).run()
        except SimFailure:
            return seed
    return None
