"""An immortal for the metrics tests: once primary, its side effect sends ``tick``
Impulses one at a time until the state holds ``TICKS`` of them, so a first start applies
exactly that many live inputs after its InitialMessage, and a later start none."""

from __future__ import annotations

import asyncio

from ambrosia_py import Immortal, impulse

TICKS = 12


class Ticker(Immortal):
    def __init__(self) -> None:
        self.ticks = 0

    def on_become_primary(self) -> None:
        self.ctx.spawn(self._drive(TICKS - self.ticks))

    async def _drive(self, count: int) -> None:
        for _ in range(count):
            self.impulse_self.tick()
            await asyncio.sleep(0.02)

    @impulse
    def tick(self) -> None:
        self.ticks += 1
        self.ctx.log.info("ticks: %d", self.ticks)
