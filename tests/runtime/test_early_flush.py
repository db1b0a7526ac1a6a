"""A long handler's RPCs written while it runs (every ``FLUSH_EVERY``): over real
processes, with kill -9 of either binding between bursts, every fork arrives exactly once
and in order."""

from __future__ import annotations

import random

import pytest

from ambrosia_py import Immortal, fork, rpc
from ambrosia_py.runtime.core import FLUSH_EVERY
from tests.launcher import Launcher

pytestmark = pytest.mark.integration

BURST = 2 * FLUSH_EVERY + 88  # each burst crosses the mark twice, then ends between marks
BURSTS = 6
SINK = "flush-sink"


class FlushSink(Immortal):
    def __init__(self) -> None:
        self.taken = 0
        self.disorder = 0

    @fork
    def take(self, i: int) -> None:
        if i != self.taken:
            self.disorder += 1
        self.taken += 1

    @rpc
    async def report(self) -> list[int]:
        return [self.taken, self.disorder]


class FlushSource(Immortal):
    async def on_first_start(self) -> None:
        sink = self.immortal(SINK, FlushSink)
        for b in range(BURSTS):
            for i in range(b * BURST, (b + 1) * BURST):
                sink.take(i)
            taken, disorder = await sink.report()
            self.ctx.log.info("burst %d: %d taken, %d out of order", b, taken, disorder)


def test_a_long_handlers_rpcs_written_early_arrive_once_and_in_order(
        launcher: Launcher) -> None:
    here = __name__
    sink = launcher.start(f"{here}:FlushSink", SINK)
    source = launcher.start(f"{here}:FlushSource", "flush-source")
    # One binding killed after one burst, the other after a later one.
    first, second = sorted(random.sample(range(BURSTS - 1), 2))
    source.wait_for(f"burst {first}:")
    sink.kill()
    sink = launcher.start(f"{here}:FlushSink", SINK)
    source.wait_for(f"burst {second}:")
    source.kill()
    source = launcher.start(f"{here}:FlushSource", "flush-source")
    last = source.wait_for(f"burst {BURSTS - 1}:", timeout=120)
    assert f"{BURSTS * BURST} taken, 0 out of order" in last
    source.stop()
    sink.stop()
