"""The immortal every simulated instance runs: rounds of calls to every other instance,
each round awaiting one answer, so that a run exercises self-calls, forks over links,
awaited calls and their results, and handlers suspended across checkpoints.

``RoundsV2`` is its next version, the target of a live upgrade.

Instance ``i`` starts round 1 at its first start. Round ``k`` (asking its coordinator
for a checkpoint in even rounds, when primary) forks ``ping(i, k)`` to every peer,
awaits ``echo(i, k)`` from one of them (round-robin), keeps the answer, and forks round
``k + 1`` to itself, up to ``rounds``. Whatever the crashes and partitions,
each instance must end with ``applied[p] == [1..rounds]`` for every peer ``p`` (each
ping once, in order), ``echoed[p]`` a subsequence of it (the rounds ``p`` awaited
here), and ``answers == [10, 20, ...]``.
"""

from __future__ import annotations

from typing import Any

from ambrosia_py import Immortal, fork, rpc


class Rounds(Immortal):
    def __init__(self) -> None:
        self.applied: dict[str, list[int]] = {}  # per caller, the pings applied, in order
        self.echoed: dict[str, list[int]] = {}  # per caller, the echoes answered
        self.answers: list[int] = []  # the echoes this instance awaited
        self.round = 0  # the last round started

    def observed(self) -> dict[str, Any]:
        """The state a check compares."""
        return {"applied": self.applied, "echoed": self.echoed, "answers": self.answers,
                "round": self.round}

    def on_first_start(self) -> None:
        self.self_proxy.run_round.fork(1)

    @fork
    async def run_round(self, k: int) -> None:
        me = self.ctx.instance_name
        peers: list[str] = list(self.ctx.config["peers"])
        self.round = k
        if k % 2 == 0 and self.ctx.is_primary:
            self.ctx.request_checkpoint()  # the binding asks, as well as the log's size
        for p in peers:
            self.immortal(p, Rounds).ping.fork(me, k)
        answer = await self.immortal(peers[k % len(peers)], Rounds).echo(me, k)
        self.answers.append(answer)
        if k < int(self.ctx.config["rounds"]):
            self.self_proxy.run_round.fork(k + 1)

    @fork
    def ping(self, origin: str, k: int) -> None:
        self.applied.setdefault(origin, []).append(k)

    @rpc
    async def echo(self, origin: str, k: int) -> int:
        self.echoed.setdefault(origin, []).append(k)
        return k * 10


class RoundsV2(Rounds):
    """The next version of ``Rounds`` (a live upgrade's target): the same calls, and
    ``upgrades``, how many conversions made this state (one per upgrade lived through:
    two would be an upgrade done twice)."""

    version = 1

    def __init__(self) -> None:
        super().__init__()
        self.upgrades = 0

    def observed(self) -> dict[str, Any]:
        return {**super().observed(), "upgrades": self.upgrades}

    @classmethod
    def upgrade_from(cls, previous: Any) -> RoundsV2:
        new = cls()
        new.applied, new.echoed = previous.applied, previous.echoed
        new.answers, new.round = previous.answers, previous.round
        new.upgrades = getattr(previous, "upgrades", 0) + 1
        return new
