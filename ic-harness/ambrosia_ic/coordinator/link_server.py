"""The link server: other instances' coordinators connect here, authenticate, and send
numbered records of calls; each is queued once, in order, and acknowledged (TrimTo) once
logged. A sender that reconnects resends from the position the handshake names.

Each inbound link is an ``asyncio.Protocol`` (``_Inbound``): the handshake and the
records are parsed sans-IO (``links.check_hello``, ``frames.LinkRecords``) in its
callbacks, and each read ends with ``burst_done`` (the coordinator commits what it
brought). No task or event stands between the socket and the log.
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
from ambrosia_ic.errors import LinkAuthenticationError, RegistryError

from .. import registry
from ..binding import LOOPBACK
from ..links import (
    HANDSHAKE_TIMEOUT,
    HELLO_MAX,
    Hello,
    challenge,
    check_hello,
    hello_reply,
    not_registered,
)
from .ack_batch import AckBatch
from .frames import LinkRecord, LinkRecords

__all__ = ["ACK_DELAY", "WATCH_SENDER", "LinkServer"]

ACK_DELAY = 0.002  # seconds: acknowledgements made within this go out together
# A linked sender that began a record and then sends nothing for this long is closed (it
# reconnects and sends again from the position acknowledged); idle between records is fine.
STALL_SECONDS = 30.0

# The sender name of a standby's watch on the primary (``replication.watch``): never an
# instance's, whose names start with a letter or a digit.
WATCH_SENDER = "#watch"

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
    """One inbound link: the handshake, then records until it breaks. A peer that fails
    the handshake (or is too slow with it) is refused with one line; one that breaks the
    protocol afterwards is logged and dropped (it reconnects and resends)."""

    def __init__(self, server: LinkServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = ("?", "?")
        self.nonce_s = b""
        self.hello: bytearray | None = bytearray()
        self.sender: str | None = None
        self.records = LinkRecords()
        self.timer: asyncio.TimerHandle | None = None
        self.admitting: asyncio.Task[None] | None = None
        self.watching = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport); with TLS, the
        # handshake is done and the peer's certificate checked (``TlsServerProtocol``).
        self.transport = cast(asyncio.Transport, transport)
        self.peer = self.transport.get_extra_info("peername") or self.peer
        first, self.nonce_s = challenge()
        write_unless_closing(self.transport, first)
        self.timer = asyncio.get_running_loop().call_later(
            HANDSHAKE_TIMEOUT, self._refuse, "TimeoutError")

    def _refuse(self, why: str) -> None:
        if self.hello is None:
            return
        self.hello = None
        who = registry.format_address(str(self.peer[0]), self.peer[1])  # type: ignore[arg-type]
        self.server._log(f"refused a link from {who}: {why}")
        if self.timer is not None:
            self.timer.cancel()
        assert self.transport is not None
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.watching:
            return  # a watch sends nothing after its hello
        if self.sender is None:
            if self.hello is None:
                return  # refused: the transport is closing
            self.hello += data
            if self.admitting is not None:
                return  # kept until the sender is admitted
            server = self.server
            try:
                got = check_hello(self.hello, self.nonce_s, server.secret, server.name)
                if got is None and len(self.hello) >= HELLO_MAX:
                    raise LinkAuthenticationError("malformed link handshake")
            except LinkAuthenticationError as err:
                self._refuse(str(err))
                return
            if got is not None and got.sender == WATCH_SENDER:
                self._watched(got)
            elif got is not None:
                # Whether the sender may link can take a lookup (a registration in the
                # cluster): asked off this callback, still within the handshake's time.
                self.admitting = asyncio.get_running_loop().create_task(self._admit(got))
            return
        self._records(self.sender, data)

    def _watched(self, hello: Hello) -> None:
        """A standby's watch: answered with the epoch held, then held open (and read from
        only to see it close), if this coordinator holds one."""
        server = self.server
        epoch = server.watch_epoch()
        if epoch is None:
            self._refuse("a standby's watch, but this replica is not the primary")
            return
        assert self.transport is not None and self.timer is not None
        self.timer.cancel()
        self.timer = None
        self.hello = None
        self.watching = True
        write_unless_closing(self.transport, hello_reply(server.secret, hello, self.nonce_s,
                                                         epoch))
        server._watchers.add(self.transport)

    async def _admit(self, hello: Hello) -> None:
        server = self.server
        try:
            known = await server._is_registered(hello.sender)
        except asyncio.CancelledError:
            return  # the connection went away first
        if self.hello is None:
            return  # refused meanwhile (the handshake's time ran out)
        if not known:
            self._refuse(str(not_registered(hello.sender)))
            return
        assert self.transport is not None and self.timer is not None
        self.timer.cancel()
        write_unless_closing(self.transport, hello_reply(server.secret, hello, self.nonce_s,
                                         server._logged(hello.sender)))
        data = bytes(self.hello[hello.used:])
        self.hello = None
        self.sender = hello.sender
        server._joined(hello.sender, self.transport)
        if data:
            self._records(hello.sender, data)

    def _records(self, sender: str, data: bytes) -> None:
        server = self.server
        try:
            for rec in self.records.receive_data(data):
                server._on_record(sender, rec)
        except RemoteProtocolError as err:  # a broken record, or a gap in the calls
            server._log(f"link from {sender} broke the protocol: {err}")
            assert self.transport is not None
            self.transport.close()
        server.burst_done()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.records.partial:  # the rest must follow in time
            self.timer = asyncio.get_running_loop().call_later(
                server.stall_seconds, self._stalled, sender)

    def _stalled(self, sender: str) -> None:
        self.server._log(f"link from {sender} sent part of a record and nothing more for "
                         f"{self.server.stall_seconds:g} s; closed (it sends again from "
                         "the position acknowledged)")
        assert self.transport is not None
        self.transport.close()

    def eof_received(self) -> bool:
        return False  # the sender went away: it reconnects and resends from our position

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError) and self.sender is not None:
            # An altered, replayed or cut TLS record: the sender reconnects and resends
            # from the position acknowledged.
            self.server._log(f"link from {self.sender} closed: {describe_tls_error(exc)}")
        if self.timer is not None:
            self.timer.cancel()
        if self.watching:
            self.server._watchers.discard(cast(asyncio.Transport, self.transport))
        if self.admitting is not None and self.sender is None:
            self.admitting.cancel()
        if self.sender is not None:
            self.server._left(self.sender, self.transport)  # type: ignore[arg-type]
        elif self.hello is not None:
            self._refuse("the peer closed during the link handshake")
