"""The binding's two local sockets: listen on the receive and send ports, accept one
binding, refuse any second one.

A binding connects to the receive port and right after to the send port, and says
nothing on the receive port until the coordinator has spoken. So a connection alone
proves nothing: whoever connected first would take the binding's slot and could hold it
forever. A connection is therefore only accepted as the binding's once its partner on
the other port has arrived. One that waits longer than ``pair_timeout`` seconds for its
partner is dropped (and logged in one line), as is one that a newer connection to the
same port replaces; the ports keep listening for the real binding meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

from ambrosia_py.errors import CoordinatorError

__all__ = ["LOOPBACK", "PAIR_TIMEOUT", "BindingPorts"]

LOOPBACK = "127.0.0.1"
PAIR_TIMEOUT = 5.0

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class BindingPorts:
    """Listens on 127.0.0.1 on both ports; ``accept()`` returns once one binding has
    connected to both (it connects to the receive port first, but either order works).

    Args:
        receive_port: the port the binding writes to.
        send_port: the port the binding reads from.
        log: takes one line about each connection dropped while waiting for the binding.
        pair_timeout: how long a connection to one port waits for its partner on the
            other port before it is dropped.
    """

    def __init__(self, receive_port: int, send_port: int, log: Callable[[str], None], *,
                 pair_timeout: float = PAIR_TIMEOUT) -> None:
        self.receive_port = receive_port
        self.send_port = send_port
        self.log = log
        self.pair_timeout = pair_timeout
        self._servers: list[asyncio.Server] = []
        # port name -> the connection waiting there for its partner, and its deadline
        self._waiting: dict[str, tuple[Stream, asyncio.TimerHandle]] = {}
        self._binding: asyncio.Future[tuple[Stream, Stream]] | None = None

    async def open(self) -> None:
        """Listen on both ports.

        Raises:
            CoordinatorError: a port cannot be listened on (in use, say).
        """
        self._binding = asyncio.get_running_loop().create_future()
        for port, side in ((self.receive_port, "receive"), (self.send_port, "send")):
            try:
                server = await asyncio.start_server(
                    self._handler(side), LOOPBACK, port, reuse_address=True
                )
            except OSError as err:
                self.close()
                # asyncio's strerror repeats the address; the errno's own text suffices.
                why = os.strerror(err.errno) if err.errno else str(err)
                raise CoordinatorError(
                    f"cannot listen on {LOOPBACK}:{port} (the {side} port): {why}"
                ) from None
            self._servers.append(server)

    def _handler(self, side: str) -> Any:
        other = "send" if side == "receive" else "receive"

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            binding = self._binding
            if binding is None or binding.done():
                writer.close()  # one binding per coordinator
                return
            if side in self._waiting:
                self._drop(side, f"a newer connection to the {side} port replaced it")
            partner = self._waiting.pop(other, None)
            if partner is None:
                timer = asyncio.get_running_loop().call_later(
                    self.pair_timeout, self._drop, side,
                    f"no connection to the {other} port followed within "
                    f"{self.pair_timeout:g} s",
                )
                self._waiting[side] = ((reader, writer), timer)
                return
            partner[1].cancel()
            mine = (reader, writer)
            binding.set_result((mine, partner[0]) if side == "receive" else (partner[0], mine))

        return on_connect

    def _drop(self, side: str, why: str) -> None:
        (_, writer), timer = self._waiting.pop(side)
        timer.cancel()
        peer = writer.get_extra_info("peername") or ("?", "?")
        self.log(f"dropped a connection to the {side} port from {peer[0]}:{peer[1]}: {why}")
        writer.close()

    async def accept(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The receive port's reader (binding -> coordinator) and the send port's writer.

        Both connections stay open until ``close()``; the ports stop listening.
        """
        assert self._binding is not None, "open() first"
        (reader, _), (_, writer) = await self._binding
        for server in self._servers:
            server.close()
        self._servers.clear()
        return reader, writer

    def close(self) -> None:
        """Stop listening and close every connection taken, the binding's included."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for side in list(self._waiting):
            (_, writer), timer = self._waiting.pop(side)
            timer.cancel()
            writer.close()
        binding = self._binding
        if binding is not None and binding.done() and not binding.cancelled():
            for _, writer in binding.result():
                with contextlib.suppress(Exception):
                    writer.close()
