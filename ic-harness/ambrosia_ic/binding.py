"""The binding's two local sockets: listen on the receive and send ports, accept one
binding, refuse any second one."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ambrosia_py.errors import CoordinatorError

__all__ = ["BindingPorts", "LOOPBACK"]

LOOPBACK = "127.0.0.1"


class BindingPorts:
    """Listens on 127.0.0.1 on both ports; ``accept()`` returns once the binding has
    connected to both (it connects to the receive port first, but either order works)."""

    def __init__(self, receive_port: int, send_port: int) -> None:
        self.receive_port = receive_port
        self.send_port = send_port
        self._servers: list[asyncio.Server] = []
        self._receive: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        self._send: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]]

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._receive = loop.create_future()
        self._send = loop.create_future()
        for port, fut in ((self.receive_port, self._receive), (self.send_port, self._send)):
            try:
                server = await asyncio.start_server(
                    self._handler(fut), LOOPBACK, port, reuse_address=True
                )
            except OSError as err:
                self.close()
                raise CoordinatorError(
                    f"cannot listen on {LOOPBACK}:{port}: {err.strerror or err}"
                ) from None
            self._servers.append(server)

    @staticmethod
    def _handler(
        fut: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
    ) -> Any:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if fut.done():
                writer.close()  # one binding per coordinator
                return
            fut.set_result((reader, writer))

        return on_connect

    async def accept(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The receive port's reader (binding -> coordinator) and the send port's writer."""
        (reader, rw), (sr, writer) = await asyncio.gather(self._receive, self._send)
        self._unused = (rw, sr)  # keep the other halves referenced so they stay open
        for server in self._servers:
            server.close()  # stop accepting; the two connections stay open
        return reader, writer

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        for fut in (getattr(self, "_receive", None), getattr(self, "_send", None)):
            if fut is not None and fut.done() and not fut.cancelled():
                with contextlib.suppress(Exception):
                    fut.result()[1].close()
