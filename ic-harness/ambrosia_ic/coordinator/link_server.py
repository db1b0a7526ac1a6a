"""The link server: other instances' coordinators connect here, authenticate, and send
numbered records of calls; each is queued once, in order, and acknowledged (TrimTo) once
logged. A sender that reconnects resends from the position the handshake names.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from ambrosia_py.errors import (
    CoordinatorError,
    LinkAuthenticationError,
    RegistryError,
    RemoteProtocolError,
    UnexpectedMessageError,
)
from ambrosia_py.wire import TrimTo

from .. import registry
from ..binding import LOOPBACK
from ..links import HANDSHAKE_TIMEOUT, accept_link
from .frames import LinkRecord, LinkRecords, skip_frames

__all__ = ["LinkServer"]

# (input key, link sequence number, message bytes), as the commit queue holds them.
Submit = Callable[[tuple[str | None, int | None, bytes]], None]


class LinkServer:
    """Accepts links for instance ``name`` on ``host``:``port``.

    Args:
        logged: the last link sequence number logged from a sender (0: none).
        submit: queues an input for the committer.
        known: whether a sender may link (default: registered in ``home``).
    """

    def __init__(self, name: str, home: Path, secret: bytes, port: int,
                 logged: Callable[[str], int], submit: Submit,
                 log: Callable[[str], None],
                 known: Callable[[str], Awaitable[bool]] | None = None) -> None:
        self.name = name
        self.home = home
        self.secret = secret
        self.port = port
        self.host = LOOPBACK  # the replica's bind host, set before ``open``
        self._logged = logged
        self._submit = submit
        self._log = log
        self._known = known
        self.sock: socket.socket | None = None  # reserved before the start began
        self._server: asyncio.Server | None = None
        self._inbound: dict[str, set[asyncio.StreamWriter]] = {}
        self._accepted: dict[str, int] = {}

    async def open(self) -> None:
        """Start accepting.

        Raises:
            CoordinatorError: the port cannot be listened on (one line naming it).
        """
        try:
            if self.sock is not None:
                self._server = await asyncio.start_server(self._on_link, sock=self.sock)
            else:
                self._server = await asyncio.start_server(self._on_link, self.host, self.port,
                                                          reuse_address=True)
        except OSError as err:
            raise CoordinatorError(
                f"cannot listen for links on {registry.format_address(self.host, self.port)}: "
                f"{err.strerror}"
            ) from None

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        elif self.sock is not None:
            self.sock.close()
        for writers in self._inbound.values():
            for w in writers:
                w.close()

    def acknowledge(self, positions: Mapping[str, int]) -> None:
        """Tell each sender how far its calls are logged."""
        for sender, seq in positions.items():
            writers = self._inbound.get(sender)
            if writers:
                ack = TrimTo(seq).encode()
                for w in writers:
                    w.write(ack)

    async def _is_registered(self, name: str) -> bool:
        if self._known is not None:
            return await self._known(name)
        try:
            registry.load(name, self.home)
        except RegistryError:
            return False
        return True

    async def _on_link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            sender = await asyncio.wait_for(
                accept_link(reader, writer, self.secret, self.name, self._is_registered,
                            self._logged),
                HANDSHAKE_TIMEOUT,
            )
        except (TimeoutError, LinkAuthenticationError, OSError, asyncio.IncompleteReadError) as err:
            who = registry.format_address(peer[0], peer[1])
            self._log(f"refused a link from {who}: {str(err) or type(err).__name__}")
            writer.close()
            return
        self._inbound.setdefault(sender, set()).add(writer)
        records = LinkRecords()
        try:
            while data := await reader.read(1 << 16):
                for rec in records.receive_data(data):
                    self._on_record(sender, rec)
        except RemoteProtocolError as err:
            self._log(f"link from {sender} broke the protocol: {err}")
        except OSError:
            pass  # the sender went away: it reconnects and resends from our position
        except asyncio.CancelledError:
            # The coordinator is stopping. Ending normally keeps asyncio's stream callback
            # (Python 3.11) from printing a traceback for a cancelled handler.
            pass
        finally:
            self._inbound[sender].discard(writer)
            writer.close()

    def _on_record(self, sender: str, rec: LinkRecord) -> None:
        """One record: its calls are queued as the bytes that came (checked, not decoded)."""
        if rec.seq_id < 0:
            self._submit((None, None, rec.body))  # Impulses: unnumbered, at most once
            return
        accepted = self._accepted.get(sender, self._logged(sender))
        if rec.seq_id <= accepted:
            return  # a resend of something already logged or waiting to be
        first = rec.seq_id - rec.calls + 1
        if first > accepted + 1:
            raise UnexpectedMessageError(
                f"link calls {first}..{rec.seq_id} from {sender} after {accepted}"
            )
        body = rec.body if first > accepted else skip_frames(rec.body, accepted + 1 - first)
        self._accepted[sender] = rec.seq_id
        self._submit((sender, rec.seq_id, body))
