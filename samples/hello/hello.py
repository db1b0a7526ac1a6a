"""Hello, immortals: a client and a server, with async/await and fork calls.

Run the server, then the client, each in its own terminal:

    ambrosia run samples.hello.hello:Server -i hello-server
    ambrosia run samples.hello.hello:Client -i hello-client
"""

from __future__ import annotations

from ambrosia_py import Immortal, fork, rpc

SERVER = "hello-server"


class Server(Immortal):
    remote_errors = (ValueError,)  # callers re-raise these as themselves

    def __init__(self) -> None:
        self.greeted: list[str] = []
        self.notes: list[str] = []

    @rpc
    async def greet(self, name: str) -> str:
        if not name:
            raise ValueError("a greeting needs a name")
        self.greeted.append(name)
        return f"Hello, {name}! You are visitor {len(self.greeted)}."

    @fork
    def note(self, text: str) -> None:
        self.notes.append(text)
        self.ctx.log.info("server note: %s", text)


class Client(Immortal):
    def __init__(self) -> None:
        self.replies: list[str] = []
        self.errors: list[str] = []

    async def on_first_start(self) -> None:
        server = self.immortal(SERVER, Server)
        for name in ("Ada", "Grace", ""):
            try:
                reply = await server.greet(name)
            except ValueError as e:
                self.errors.append(str(e))
                continue
            self.replies.append(reply)
            self.ctx.log.info("client got: %s", reply)
        server.note.fork(f"the client is done: {len(self.replies)} replies")
