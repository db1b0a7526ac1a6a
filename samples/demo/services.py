"""The demo's two immortals: a client that sends numbered requests to a server."""

from __future__ import annotations

import os

from ambrosia_py import Immortal, rpc

SERVER = "demo-server"


class Server(Immortal):
    """Applies requests; a duplicate or a gap would show in ``applied``."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.total = 0

    @rpc
    async def apply(self, n: int) -> int:
        self.applied.append(n)
        self.total += n
        if n % 50 == 0:
            self.ctx.log.info("server applied request %d", n)
        return len(self.applied)

    @rpc
    async def summary(self) -> list[int]:
        """[requests applied, duplicates, first out-of-order index or -1]."""
        dups = len(self.applied) - len(set(self.applied))
        bad = next((i for i, n in enumerate(self.applied) if n != i + 1), -1)
        return [len(self.applied), dups, bad]


class Client(Immortal):
    """Sends requests 1..N one after another, awaiting each; pending calls survive crashes."""

    def __init__(self) -> None:
        self.requests = int(os.environ.get("DEMO_REQUESTS", "500"))
        self.acks: list[int] = []
        self.summary: list[int] = []

    async def on_first_start(self) -> None:
        server = self.immortal(SERVER, Server)
        for n in range(1, self.requests + 1):
            self.acks.append(await server.apply(n))
        self.summary = await server.summary()
        applied, dups, bad = self.summary
        self.ctx.log.info("client done: %d requests, %d applied, %d duplicates, order %s",
                          self.requests, applied, dups, "ok" if bad < 0 else f"broken at {bad}")
