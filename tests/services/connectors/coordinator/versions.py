"""Immortals the coordinator's lifecycle tests run with ``ambrosia run``: a next version
of the coordinator (for a live upgrade) and a client that calls its status RPC."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Self

from ambrosia_services.connectors import ConnectorCoordinator
from ambrosia_services.connectors.coordinator.core import Applied

from ambrosia_py import Immortal, rpc

COORDINATOR = "coord"  # the instance StatusProbe asks


class CoordinatorV1(ConnectorCoordinator):
    """Version 1: the same route, and a count of the runs of messages it handled, so a
    test can tell that the new code (not the old) applied what came after the upgrade."""

    version = 1

    def __init__(self) -> None:
        super().__init__()
        self.v1_runs = 0

    @classmethod
    def upgrade_from(cls, previous: Immortal) -> Self:
        # Version 0 keeps only the core; the count starts at the upgrade.
        assert isinstance(previous, ConnectorCoordinator)
        new = cls()
        new.core = previous.core
        return new

    def on_messages(self, stream_id: int, messages: Sequence[Applied]) -> None:
        self.v1_runs += 1
        super().on_messages(stream_id, messages)

    def checkpoint_state(self) -> Any:
        return {"core": super().checkpoint_state(), "v1_runs": self.v1_runs}

    def load_state(self, state: Any) -> None:
        super().load_state(state["core"])
        self.v1_runs = state["v1_runs"]

    @rpc
    async def status(self) -> dict[str, Any]:
        report = self.core.status()
        report["v1_runs"] = self.v1_runs
        return report


class CoordinatorV2(CoordinatorV1):
    """Version 2: version 1's code and state under the next number (no conversion)."""

    version = 2


class StatusProbe(Immortal):
    """Calls the coordinator's ``status`` RPC once, at its first start, and logs the
    answer as one JSON line (``status answer: {...}``)."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] = {}

    async def on_first_start(self) -> None:
        self.answer = await self.immortal(COORDINATOR, ConnectorCoordinator).status()
        self.ctx.log.info("status answer: %s", json.dumps(self.answer, sort_keys=True))
