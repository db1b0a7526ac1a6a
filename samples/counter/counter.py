"""An immortal counter: its first start forks ``increment(1)`` to itself; every
increment is applied exactly once, even across ``kill -9``."""

from __future__ import annotations

from ambrosia_py import Immortal, fork, impulse, rpc


class Counter(Immortal):
    def __init__(self) -> None:
        self.count = 0
        self.applied: list[int] = []

    def on_first_start(self) -> None:
        self.self_proxy.increment(1)

    def on_become_primary(self) -> None:
        self.ctx.log.info("count is %d on becoming primary", self.count)

    @fork
    def increment(self, by: int) -> None:
        self.count += by
        self.applied.append(by)
        self.ctx.log.info("count is %d", self.count)

    @impulse
    def poke(self, by: int) -> None:
        """Sent by the outside world (e.g. a test) while the counter is primary."""
        self.count += by
        self.applied.append(by)

    @rpc
    async def read(self) -> int:
        return self.count
