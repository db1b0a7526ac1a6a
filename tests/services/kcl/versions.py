"""Next versions of the KCL coordinator for live upgrades: each changes nothing but its
number, so each takes the whole state (streams, sinks, and the records kept for the
processors with their checkpoints) with no conversion."""

from __future__ import annotations

from ambrosia_services.kcl import KclCoordinator


class KclCoordinatorV1(KclCoordinator):
    version = 1


class KclCoordinatorV2(KclCoordinatorV1):
    version = 2
