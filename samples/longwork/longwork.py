"""Long-lived work as a state machine: progress is ordinary state, advanced by inputs
(forks and Impulses), so no handler stays suspended on an ``await`` and every checkpoint is
just the state, however long the work takes.

Run: ``ambrosia run samples.longwork.longwork:Jobs -i jobs``
"""

from __future__ import annotations

import asyncio

from ambrosia_py import Immortal, fork, impulse

TICK_SECONDS = 0.2  # a real service would tick in minutes or hours


class Jobs(Immortal):
    """Jobs that take several steps spread over time. A timer in the outside world sends
    ``tick`` Impulses while there is work; each tick is a logged input that advances every
    job by one step. Contrast: ``await`` in a loop for hours would make every checkpoint
    carry every input since the loop began."""

    def __init__(self) -> None:
        self.left: dict[str, int] = {}  # job -> steps still to do
        self.done: list[str] = []
        self.ticks = 0

    def on_first_start(self) -> None:
        self.self_proxy.submit("report", 3)
        self.self_proxy.submit("backup", 5)

    @fork
    def submit(self, job: str, steps: int) -> None:
        self.left[job] = steps
        self.ctx.log.info("%s submitted: %d steps", job, steps)

    def on_become_primary(self) -> None:
        self.ctx.spawn(self._clock())

    async def _clock(self) -> None:
        """Outside-world code: runs only when primary; its results come back as Impulses."""
        while True:
            await asyncio.sleep(TICK_SECONDS)
            if self.left:
                self.impulse_self.tick()

    @impulse
    def tick(self) -> None:
        if not self.left:
            return  # a tick sent as the last job finished: nothing to advance
        self.ticks += 1
        for job in sorted(self.left):
            self.left[job] -= 1
            if self.left[job] == 0:
                del self.left[job]
                self.done.append(job)
                self.ctx.log.info("%s done at tick %d", job, self.ticks)
