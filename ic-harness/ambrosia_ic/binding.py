"""The binding's two local sockets: listen on the receive and send ports, accept one
binding, refuse any second one.

A binding connects to the receive port and right after to the send port, and says
nothing on the receive port until the coordinator has spoken. So a connection alone
proves nothing: whoever connected first would take the binding's slot and could hold it
forever. A connection is therefore only accepted as the binding's once its partner on
the other port has arrived. One that waits longer than ``pair_timeout`` seconds for its
partner is dropped (and logged in one line), as is one that a newer connection to the
same port replaces; the ports keep listening for the real binding meanwhile.

The receive connection is held by a plain protocol (``_Held``) until it is accepted, and
then handed to the protocol the coordinator reads it with (``accept_into``): the
coordinator parses and logs in that protocol's callbacks, with no reader task between
the socket and the log. ``accept()`` hands it to a stream reader instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections.abc import Callable
from typing import Any, cast

from ambrosia_core.addresses import Address
from ambrosia_core.errors import CoordinatorError

__all__ = ["BUSY_WAIT", "LOOPBACK", "PAIR_TIMEOUT", "BindingPorts", "reserve_port"]

LOOPBACK = "127.0.0.1"
PAIR_TIMEOUT = 5.0
# A port held by a connection frees itself when the connection ends, or, if our side of it
# closed first, 60 s later (Linux's TIME_WAIT): wait a little longer than that.
BUSY_WAIT = 65.0

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# Bytes a receive connection may send before it is accepted; it is paused beyond that.
_HELD_LIMIT = 1 << 16


class _Held(asyncio.Protocol):
    """A receive connection waiting to be accepted: what it sends (or its end) is kept
    and passed on, in order, to the protocol it is handed to."""

    def __init__(self, on_made: Callable[[_Held], None]) -> None:
        self._on_made = on_made
        self.transport: asyncio.Transport | None = None
        self._data = bytearray()
        self._eof = False
        self._lost: tuple[Exception | None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)
        self._on_made(self)

    def data_received(self, data: bytes) -> None:
        self._data += data
        if len(self._data) > _HELD_LIMIT and self.transport is not None:
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        return True  # keep it half open: the protocol it goes to decides

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = (exc,)

    # What the waiting list needs of a connection (a StreamWriter offers the same).
    def get_extra_info(self, name: str) -> Any:
        return None if self.transport is None else self.transport.get_extra_info(name)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def hand_to(self, protocol: asyncio.Protocol) -> None:
        """From now on ``protocol`` gets this connection's callbacks, starting with
        whatever came before."""
        transport = self.transport
        assert transport is not None
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if self._data:
            data = bytes(self._data)
            self._data.clear()
            protocol.data_received(data)
        if self._lost is not None:
            protocol.connection_lost(self._lost[0])
            return
        if self._eof and not protocol.eof_received():
            transport.close()
        elif not transport.is_closing():
            transport.resume_reading()


def reserve_port(port: int, what: str, host: str = LOOPBACK) -> socket.socket:
    """A listening socket on ``host``:``port`` (127.0.0.1 unless a link server is told
    otherwise), taken before a start writes anything (a busy port must fail the start,
    not strand it half done); serve it later with ``asyncio.start_server(sock=...)``.
    Connections wait in the backlog until then.

    Raises:
        CoordinatorError: the port cannot be listened on (in use, say, or ``host`` is not
            an address of this machine).
    """
    where = Address(host, port)
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (OSError, IndexError) as err:
        reason = getattr(err, "strerror", None) or err
        raise CoordinatorError(f"cannot listen for {what} on {where}: {reason}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise CoordinatorError(
            f"cannot listen for {what} on {where}: {err.strerror or err}"
        ) from None
    return sock


class BindingPorts:
    """Listens on 127.0.0.1 on both ports; ``accept()`` returns once one binding has
    connected to both (it connects to the receive port first, but either order works).

    Args:
        receive_port: the port the binding writes to.
        send_port: the port the binding reads from.
        log: takes one line about each connection dropped while waiting for the binding.
        pair_timeout: how long a connection to one port waits for its partner on the
            other port before it is dropped.
        busy_wait: how long to wait for a port that a connection (not a listener) holds.
    """

    def __init__(self, receive_port: int, send_port: int, log: Callable[[str], None], *,
                 pair_timeout: float = PAIR_TIMEOUT, busy_wait: float = BUSY_WAIT) -> None:
        self.receive_port = receive_port
        self.send_port = send_port
        self.log = log
        self.pair_timeout = pair_timeout
        self.busy_wait = busy_wait
        self._servers: list[asyncio.Server] = []
        # port name -> the connection waiting there for its partner, and its deadline
        self._waiting: dict[str, tuple[_Held | Stream, asyncio.TimerHandle]] = {}
        self._binding: asyncio.Future[tuple[_Held, Stream]] | None = None

    async def open(self) -> None:
        """Listen on both ports.

        Raises:
            CoordinatorError: a port cannot be listened on (in use, say).
        """
        self._binding = asyncio.get_running_loop().create_future()
        for port, side in ((self.receive_port, "receive"), (self.send_port, "send")):
            self._servers.append(await self._listen(port, side))

    async def _listen(self, port: int, side: str) -> asyncio.Server:
        """Listen on one port. A port in use by a program listening there is refused at
        once; one held only by a connection (another program's outgoing connection got
        it as its local port, say, or such a connection is in TIME_WAIT) frees itself, so
        that is waited out, for a while."""
        deadline = asyncio.get_running_loop().time() + self.busy_wait
        said = False
        loop = asyncio.get_running_loop()
        while True:
            try:
                if side == "receive":
                    return await loop.create_server(self._receive_protocol, LOOPBACK, port,
                                                    reuse_address=True)
                return await asyncio.start_server(self._on_send, LOOPBACK, port,
                                                  reuse_address=True)
            except OSError as err:
                if err.errno == errno.EADDRINUSE and not await _someone_listens(port):
                    if asyncio.get_running_loop().time() < deadline:
                        if not said:
                            self.log(f"the {side} port {port} is held by a connection (or one "
                                     "in TIME_WAIT), not a listener; waiting up to "
                                     f"{self.busy_wait:g} s for it")
                            said = True
                        await asyncio.sleep(0.1)
                        continue
                self.close()
                # asyncio's strerror repeats the address; the errno's own text suffices.
                why = os.strerror(err.errno) if err.errno else str(err)
                raise CoordinatorError(
                    f"cannot listen on {LOOPBACK}:{port} (the {side} port): {why}"
                ) from None

    def _receive_protocol(self) -> _Held:
        # Offered once its transport exists: asyncio calls connection_made in a later
        # turn of the loop than the factory, uvloop in the same one.
        return _Held(lambda held: self._arrived("receive", held))

    async def _on_send(self, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        self._arrived("send", (reader, writer))

    def _arrived(self, side: str, conn: _Held | Stream) -> None:
        other = "send" if side == "receive" else "receive"
        binding = self._binding
        if binding is None or binding.done():
            _close(conn)  # one binding per coordinator
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
            self._waiting[side] = (conn, timer)
            return
        partner[1].cancel()
        held, stream = (conn, partner[0]) if side == "receive" else (partner[0], conn)
        assert isinstance(held, _Held) and isinstance(stream, tuple)
        binding.set_result((held, stream))

    def _drop(self, side: str, why: str) -> None:
        conn, timer = self._waiting.pop(side)
        timer.cancel()
        writer = conn if isinstance(conn, _Held) else conn[1]
        peer = writer.get_extra_info("peername") or ("?", "?")
        self.log(f"dropped a connection to the {side} port from {peer[0]}:{peer[1]}: {why}")
        writer.close()

    async def accept_into(self, protocol: asyncio.Protocol) -> asyncio.StreamWriter:
        """Wait for the binding; ``protocol`` gets the receive connection (binding ->
        coordinator, with anything it sent already); returns the send port's writer.

        Both connections stay open until ``close()``; the ports stop listening.
        """
        assert self._binding is not None, "open() first"
        held, (_, writer) = await self._binding
        for server in self._servers:
            server.close()
        self._servers.clear()
        held.hand_to(protocol)
        return writer

    async def accept(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The receive port's reader (binding -> coordinator) and the send port's writer."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        writer = await self.accept_into(asyncio.StreamReaderProtocol(reader, loop=loop))
        return reader, writer

    def close(self) -> None:
        """Stop listening and close every connection taken, the binding's included."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for side in list(self._waiting):
            conn, timer = self._waiting.pop(side)
            timer.cancel()
            _close(conn)
        binding = self._binding
        if binding is not None and binding.done() and not binding.cancelled():
            for conn in binding.result():
                with contextlib.suppress(Exception):
                    _close(conn)


def _close(conn: _Held | Stream) -> None:
    (conn if isinstance(conn, _Held) else conn[1]).close()


async def _someone_listens(port: int) -> bool:
    """Whether a program accepts connections on ``port`` (a connection attempt tells)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
