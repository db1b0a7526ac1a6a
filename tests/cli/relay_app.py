"""Two versions of one service for the refusal tests: ``Relay`` (version 0) and
``RelayV2`` (version 1, which keeps its state otherwise and says how to convert)."""

from __future__ import annotations

from ambrosia_py import Immortal


class Relay(Immortal):
    version = 0

    def __init__(self) -> None:
        self.seen: list[str] = []


class RelayV2(Immortal):
    version = 1

    def __init__(self) -> None:
        self.count = 0

    @classmethod
    def upgrade_from(cls, previous: Relay) -> RelayV2:  # type: ignore[override]
        new = cls()
        new.count = len(previous.seen)
        return new
