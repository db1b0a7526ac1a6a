"""Version 2: signatures counted per name; the state conversion builds the counts."""

from __future__ import annotations

from ambrosia_py import Immortal, fork

from . import v1


class GuestBook(Immortal):
    version = 2

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    @classmethod
    def upgrade_from(cls, previous: v1.GuestBook) -> GuestBook:  # type: ignore[override]
        new = cls()
        for name in previous.names:
            new.counts[name.title()] = new.counts.get(name.title(), 0) + 1
        return new

    def on_first_start(self) -> None:
        for name in ("ada", "grace", "ada"):
            self.self_proxy.sign(name)

    @fork
    def sign(self, name: str) -> None:
        key = name.title()
        self.counts[key] = self.counts.get(key, 0) + 1
        self.ctx.log.info("signed by %s (%d signatures)", key, sum(self.counts.values()))
