"""The link server: other instances' coordinators connect here, authenticate, and send
numbered records of calls; each is queued once, in order, and acknowledged (TrimTo) once
logged. A sender that reconnects resends from the position the handshake names.

Each inbound link's rules (the handshake, admission, watches, records, stalls) are
``inbound.InboundLink``, with no I/O; an ``asyncio.Protocol`` (``_Inbound``) runs them
over its transport, and each read ends with ``burst_done`` (the coordinator commits what
it brought). No task or event stands between the socket and the log.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import cast

from ambrosia_core.errors import CoordinatorError, RemoteProtocolError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.tls import Tls, describe_tls_error
from ambrosia_core.wire import TrimTo
from ambrosia_ic.errors import RegistryError

from .. import registry
from ..binding import LOOPBACK
from ..links import HANDSHAKE_TIMEOUT
from .ack_batch import AckBatch
from .frames import LinkRecord
from .inbound import (
    STALL_SECONDS,
    WATCH_SENDER,
    Arm,
    Ask,
    Close,
    Disarm,
    InboundAction,
    InboundLink,
    Joined,
    Left,
    Log,
    Records,
    Send,
    Unwatched,
    Watching,
)

__all__ = ["ACK_DELAY", "WATCH_SENDER", "LinkServer"]

ACK_DELAY = 0.002  # seconds: acknowledgements made within this go out together

# What takes a sender's record (the core's ``link_record``: the new calls are queued once).
OnRecord = Callable[[str, LinkRecord], None]


class LinkServer:
    """Accepts links for instance ``name`` on ``host``:``port``.

    Args:
        logged: the last link sequence number logged from a sender (0: none).
        on_record: takes each record a sender sends (in order, per connection).
        known: whether a sender may link (default: registered in ``home``).
        burst_done: called after each read from a link (the coordinator commits).
        tls: accept links over TLS only, each sender showing a certificate our CA
            trusts (None: plain TCP).
    """

    def __init__(self, name: str, home: Path, secret: bytes, port: int,
                 logged: Callable[[str], int], on_record: OnRecord,
                 log: Callable[[str], None],
                 known: Callable[[str], Awaitable[bool]] | None = None,
                 burst_done: Callable[[], None] = lambda: None,
                 tls: Tls | None = None) -> None:
        self.name = name
        self.tls = tls
        self.home = home
        self.secret = secret
        self.port = port
        self.host = LOOPBACK  # the replica's bind host, set before ``open``
        self._logged = logged
        self._on_record = on_record
        self._log = log
        self._known = known
        self.burst_done = burst_done
        self.sock: socket.socket | None = None  # reserved before the start began
        self._server: asyncio.Server | None = None
        self._inbound: dict[str, set[asyncio.Transport]] = {}
        self._acks = AckBatch()  # positions to acknowledge when the timer fires
        self._ack_timer: asyncio.TimerHandle | None = None
        self.paused = False
        self.stall_seconds = STALL_SECONDS
        # The epoch this coordinator holds as primary (None: it holds none), which a
        # standby's watch is told; the watches are held open and never written to.
        self.watch_epoch: Callable[[], int | None] = lambda: None
        self._watchers: set[asyncio.Transport] = set()

    async def open(self) -> None:
        """Start accepting.

        Raises:
            CoordinatorError: the port cannot be listened on (one line naming it).
        """
        loop = asyncio.get_running_loop()
        tls = self.tls

        def inbound() -> asyncio.Protocol:
            if tls is None:
                return _Inbound(self)
            return tls.wrap_server(_Inbound(self), lambda why: self._log(
                f"refused a link: {why}"), HANDSHAKE_TIMEOUT)

        try:
            if self.sock is not None:
                self._server = await loop.create_server(inbound, sock=self.sock)
            else:
                self._server = await loop.create_server(inbound, self.host, self.port,
                                                        reuse_address=True)
        except OSError as err:
            raise CoordinatorError(
                f"cannot listen for links on {registry.format_address(self.host, self.port)}: "
                f"{err.strerror}"
            ) from None

    def close(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._server is not None:
            self._server.close()
        elif self.sock is not None:
            self.sock.close()
        for transports in self._inbound.values():
            for t in transports:
                t.close()

    def drop_watchers(self) -> None:
        """Close the standbys' watches: they may claim at once. Not part of ``close``: a
        primary that stops resigns first (so standbys need not take it for dead), and the
        process's end closes them anyway."""
        for t in list(self._watchers):
            t.close()
        self._watchers.clear()

    def pause(self) -> None:
        """Stop reading every inbound link (back-pressure; see ``commit``)."""
        if not self.paused:
            self.paused = True
            for transports in self._inbound.values():
                for t in transports:
                    t.pause_reading()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            for transports in self._inbound.values():
                for t in transports:
                    if not t.is_closing():
                        t.resume_reading()

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        """Tell each sender how far its calls are logged, within ``ACK_DELAY``: the
        acknowledgements of that time go out together (``AckBatch``)."""
        self._acks.add(positions)
        if self._acks.pending and self._ack_timer is None:
            self._ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY,
                                                                    self._send_acks)

    def _send_acks(self) -> None:
        self._ack_timer = None
        for sender, seq in self._acks.take().items():
            transports = self._inbound.get(sender)
            if transports:
                ack = TrimTo(seq).encode()
                for t in transports:
                    write_unless_closing(t, ack)

    async def _is_registered(self, name: str) -> bool:
        if self._known is not None:
            return await self._known(name)
        try:
            registry.load(name, self.home)
        except RegistryError:
            return False
        return True

    def _joined(self, sender: str, transport: asyncio.Transport) -> None:
        self._inbound.setdefault(sender, set()).add(transport)
        if self.paused:
            transport.pause_reading()

    def _left(self, sender: str, transport: asyncio.Transport) -> None:
        self._inbound.get(sender, set()).discard(transport)


class _Inbound(asyncio.Protocol):
    """One inbound connection: the transport, the timer and the registration lookup that
    its rules (``inbound.InboundLink``) ask for."""

    def __init__(self, server: LinkServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.link: InboundLink | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.asking: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport); with TLS, the
        # handshake is done and the peer's certificate checked (``TlsServerProtocol``).
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        server = self.server
        self.link = InboundLink(server.secret, server.name,
                                registry.format_address(str(peer[0]), int(peer[1]))
                                if peer else "an unknown peer", server.stall_seconds)
        self._run(self.link.start())

    def data_received(self, data: bytes) -> None:
        assert self.link is not None
        self._run(self.link.receive(data))

    def eof_received(self) -> bool:
        return False  # the sender went away: it reconnects and resends from our position

    def connection_lost(self, exc: Exception | None) -> None:
        assert self.link is not None
        if self.asking is not None:
            self.asking.cancel()
        # An altered, replayed or cut TLS record: the sender reconnects and resends from
        # the position acknowledged.
        why = describe_tls_error(exc) if isinstance(exc, ssl.SSLError) else None
        self._run(self.link.closed(why))

    def _run(self, actions: list[InboundAction]) -> None:
        server, transport, link = self.server, self.transport, self.link
        assert transport is not None and link is not None
        for action in actions:
            if isinstance(action, Records):
                try:
                    for rec in action.records:
                        server._on_record(action.sender, rec)
                except RemoteProtocolError as err:  # a gap in the calls
                    server.burst_done()
                    self._run(link.broken(err))
                    return  # what followed (the stall timer) is moot
                server.burst_done()
            elif isinstance(action, Send):
                write_unless_closing(transport, action.data)
            elif isinstance(action, Arm):
                if self.timer is not None:
                    self.timer.cancel()
                self.timer = asyncio.get_running_loop().call_later(
                    action.seconds, self._timed_out)
            elif isinstance(action, Disarm):
                if self.timer is not None:
                    self.timer.cancel()
                    self.timer = None
            elif isinstance(action, Log):
                server._log(action.line)
            elif isinstance(action, Close):
                transport.close()
            elif isinstance(action, Ask):
                if action.watch:
                    self._run(link.answer(server.watch_epoch()))
                else:
                    # Whether the sender may link can take a lookup (a registration in
                    # the cluster): asked off this callback, within the handshake's time.
                    self.asking = asyncio.get_running_loop().create_task(
                        self._ask(action.sender))
            elif isinstance(action, Joined):
                server._joined(action.sender, transport)
            elif isinstance(action, Left):
                server._left(action.sender, transport)
            elif isinstance(action, Watching):
                server._watchers.add(transport)
            elif isinstance(action, Unwatched):
                server._watchers.discard(transport)
            else:
                raise AssertionError(f"unknown inbound action {action!r}")

    def _timed_out(self) -> None:
        self.timer = None
        assert self.link is not None
        self._run(self.link.timed_out())

    async def _ask(self, sender: str) -> None:
        server = self.server
        known = await server._is_registered(sender)
        self.asking = None
        assert self.link is not None
        self._run(self.link.answer(server._logged(sender) if known else None))
