"""Helpers shared by the suites that run immortals as processes: the repository's root,
a launcher of `ambrosia run` processes (and its fixture, which a suite's conftest imports),
and the one wait for a condition (``wait_until``, and ``until`` inside an event loop)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ambrosia_py.testing import ImmortalProcess, start_immortal

ROOT = Path(__file__).resolve().parents[1]


class Launcher:
    """Starts `ambrosia run` processes in one test's AMBROSIA_HOME; kills them all after."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.procs: list[ImmortalProcess] = []

    def start(self, target: str, name: str, **kw: object) -> ImmortalProcess:
        p = start_immortal(target, name, home=self.home, cwd=ROOT, **kw)  # type: ignore[arg-type]
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            p.kill()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    home = tmp_path / "home"
    home.mkdir()
    lau = Launcher(home)
    try:
        yield lau
    finally:
        lau.close()


class NeverHappenedError(AssertionError):
    """What a test waited for did not happen within the wait's limit."""


# At most this many times its limit does a wait take on an overloaded machine.
MOST_PATIENCE = 6.0


def overdue(start: float, limit: float) -> bool:
    """Whether a wait that began at ``start`` (``time.monotonic()``) has run out: ``limit``
    seconds at the machine's pace. On a machine with more runnable processes than cores
    (the load average over the last minute) a second counts for less, up to
    ``MOST_PATIENCE`` times the limit, so that a limit chosen on an idle machine does not
    fail a test on a busy one, and a broken run still ends."""
    elapsed = time.monotonic() - start
    if elapsed <= limit:
        return False
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return elapsed > limit * min(max(1.0, load), MOST_PATIENCE)


def wait_until(cond: Callable[[], Any], what: str, limit: float = 60.0) -> Any:
    """Poll ``cond`` until it returns something true, and return that. A test waits for
    the event it checks, never for a time: ``limit`` only keeps a broken run from hanging,
    so make it generous (the machine may be busy with something else).

    Raises:
        NeverHappenedError: ``limit`` seconds passed first; it names ``what``.
    """
    start = time.monotonic()
    while True:
        value = cond()
        if value:
            return value
        if overdue(start, limit):
            raise NeverHappenedError(f"gave up waiting for {what} after {limit:g} s")
        time.sleep(0.05)  # a condition may read a big file: leave the CPU to the processes


async def until(cond: Callable[[], Any], what: str, limit: float = 60.0) -> Any:
    """``wait_until`` for a test running in an event loop: the loop goes on meanwhile."""
    start = time.monotonic()
    while True:
        value = cond()
        if value:
            return value
        if overdue(start, limit):
            raise NeverHappenedError(f"gave up waiting for {what} after {limit:g} s")
        await asyncio.sleep(0.01)
