"""The Python immortal the JS-style peer talks to (module level, for `ambrosia run`)."""

from __future__ import annotations

import attrs

from ambrosia_py import Immortal, RemoteCallError, fork, rpc

PEER = "js"


@attrs.define
class Point:
    x: int
    y: int


class PyService(Immortal):
    """Takes AmbrosiaJS-style forks and posts, and calls the peer through ``JsProxy``."""

    def __init__(self) -> None:
        self.greetings: list[list[object]] = []
        self.blobs: list[bytes] = []
        self.replies: list[object] = []

    @fork(method_id=8)
    def hello(self, greeting: str, n: int) -> None:
        self.greetings.append([greeting, n])
        self.ctx.log.info("greetings now %r", self.greetings)

    @fork(method_id=9)
    def blob(self, data: bytes) -> None:
        self.blobs.append(data)
        self.ctx.log.info("blobs now %r", self.blobs)

    @rpc
    async def add(self, a: int, b: int) -> int:
        return a + b

    @rpc
    async def divide(self, a: int, b: int) -> float:
        return a / b

    @rpc
    async def describe(self, point: Point) -> str:
        return repr(point)

    @rpc
    async def scale(self, x: int, factor: int = 2) -> int:
        return x * factor

    @rpc
    async def remember(self, text: str) -> None:  # void: JS callers see `undefined`
        self.greetings.append([text, 0])

    @rpc
    async def lookup(self, key: str) -> int | None:  # None is a value here: JS sees `null`
        return None

    @fork(method_id=11)
    async def call_js_void(self) -> None:
        js = self.js_immortal(PEER)
        self.replies.append(await js.post("forget", what="it"))
        self.ctx.log.info("void reply: %r", self.replies[-1])

    @fork(method_id=10)
    async def call_js(self, x: int) -> None:
        js = self.js_immortal(PEER)
        js.fork(20, {"text": "héllo", "n": x})
        js.fork(21, bytes([0x00, 0xFF, 0x7B, 0x01]))
        self.replies.append(await js.post("double", x=x))
        try:
            await js.post("boom", why="testing")
        except RemoteCallError as e:
            self.replies.append(f"error: {e}")
        self.ctx.log.info("js replies: %r", self.replies)
