"""Version 1 of a guest book: names in a list."""

from __future__ import annotations

from ambrosia_py import Immortal, fork


class GuestBook(Immortal):
    version = 1

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_first_start(self) -> None:
        for name in ("ada", "grace", "ada"):
            self.self_proxy.sign(name)

    @fork
    def sign(self, name: str) -> None:
        self.names.append(name)
        self.ctx.log.info("signed by %s (%d signatures)", name, len(self.names))
