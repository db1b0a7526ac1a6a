"""The connector coordinator with its fixed settings open to a test: a ``[tuning]`` table
of the configuration sets ``CoordinatorConfig``'s ``credits``, ``batch_messages``,
``handshake_seconds`` and ``segment_bytes``, which the shipped service refuses as keys (no
user has a reason to turn them; a test wants small segments, small Impulses or a short
HELLO timeout). Target: ``tests.services.connectors.tuned_app:TunedCoordinator``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from ambrosia_services.connectors import ConnectorCoordinator, CoordinatorConfig

TARGET = "tests.services.connectors.tuned_app:TunedCoordinator"


def tuned_config(config: Mapping[str, Any]) -> CoordinatorConfig:
    """``config`` read as the shipped coordinator reads it, then its ``[tuning]`` set."""
    rest = dict(config)
    tuning = rest.pop("tuning", {})
    return attrs.evolve(CoordinatorConfig.from_mapping(rest, ("tuning",)), **tuning)


class TunedCoordinator(ConnectorCoordinator):
    def coordinator_config(self) -> CoordinatorConfig:
        return tuned_config(self.ctx.config)
