"""The protocol half of a 2PC sink: the worker end of a Wallaroo sink link, over any store.

Both sinks (``ambrosia-sink``, files; ``ambrosia-pgsink``, PostgreSQL) speak the same way
to the coordinator; they differ only in where a vote, a commit and an abort become
durable. ``SinkServer`` does the speaking, as Wallaroo's own 2PC file sink did (OK(500) to
HELLO "v0.0.1" with the right cookie; only stream 1; NOTIFY_ACK with the output offset;
each data message id must be the output offset; Phase1 votes yes only for
``[committed offset, <= written)``; Phase2 settles; ACK(1, [(1, output offset)]) for an
EOS). A ``SinkStore`` is the durable side: the file store (``sinkstore.FileSinkStore``)
and the PostgreSQL store (``pgstore.PgSinkStore``) implement it.

One connection at a time, because two writers to one output would interleave their
offsets: a connection counts once its HELLO is accepted (within the handshake time, or it
is closed), and a newer accepted one replaces it. A linked peer may be idle between
frames for as long as it likes, but the rest of a frame it began must come within the same
time. Nothing is answered before the store made it durable.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ambrosia_core.addresses import Address
from ambrosia_core.tls import (
    Tls,
    describe_tls_error,
)
from ambrosia_core.wire import NEED_DATA
from ambrosia_services.connectors import DEFAULT_MAX_FRAME_SIZE

from .errors import SinkStateError, SinkStorageError, SinkUnavailableError
from .sinkanswer import SinkRefusedError, answer
from .sinkend import SINK_CREDITS, Accepted, Ended, Frame, SinkDoor, SinkEnd
from .sinkmetrics import SinkCounts
from .sinkport import DATA_STREAM_ID, Prepared, SinkStore, Vote

__all__ = ["DATA_STREAM_ID", "HANDSHAKE_SECONDS", "SINK_CREDITS", "Handler", "Prepared",
           "SinkServer", "SinkStore", "Vote", "listen"]

# How long a new connection may take to send its HELLO, and a linked one the rest of a frame
# it began: a coordinator sends either in one write, so 5 s outlasts any pause of a loaded
# host, and a stranger that connects and stays silent holds nothing for longer.
HANDSHAKE_SECONDS = 5.0
log = logging.getLogger(__name__)


@attrs.define
class _Session:
    """The authenticated connection being served."""

    peer: Any
    writer: asyncio.StreamWriter
    task: asyncio.Task[Any] | None
    ended: asyncio.Event = attrs.Factory(asyncio.Event)
    replaced: bool = False


class SinkServer:
    """Serves ``store`` to one sink link at a time.

    A connection holds the sink only once its HELLO was accepted (the right version and
    cookie), which must come within ``handshake_seconds``: a stranger that connects and
    says nothing is closed then, and never blocks the coordinator's link. A newer
    accepted connection replaces the one being served (a coordinator that reconnected,
    or took over from a fenced one, is the live writer; the old connection is closed, its
    request in progress cancelled, and its unprepared bytes dropped), so two writers
    never interleave their offsets.

    Made inside a running event loop.

    Args:
        store: the recovered durable side.
        cookie: the cookie a HELLO must carry (b"" = none).
        max_frame_size: the largest frame accepted.
        handshake_seconds: how long a new connection may take to send its HELLO.
        tls: serve over TLS, the coordinator showing a certificate our CA trusts (None:
            plain TCP, as the real Wallaroo peers speak, for loopback).
    """

    def __init__(
        self,
        store: SinkStore,
        *,
        cookie: bytes = b"",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        handshake_seconds: float = HANDSHAKE_SECONDS,
        tls: Tls | None = None,
    ) -> None:
        self.store = store
        self.tls = tls
        self.cookie = cookie
        self.max_frame_size = max_frame_size
        self.handshake_seconds = handshake_seconds
        self._door: SinkDoor[_Session] = SinkDoor()
        self._claiming = asyncio.Lock()
        self.counts = SinkCounts()  # what its metrics read (``sinkmetrics``)
        self.failed: asyncio.Future[SinkStorageError] = asyncio.get_running_loop().create_future()
        """Resolved when the store fails for good: the sink must stop (a restart recovers)."""

    @property
    def linked(self) -> bool:
        """Whether a connection is being served."""
        return self._door.served is not None

    async def start(self, address: Address) -> asyncio.Server:
        """Listen on ``address`` (port 0 picks a free port: see the server's sockets)."""
        return await listen(address, self._serve, self.tls, self.handshake_seconds)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        end = SinkEnd(self.cookie, self.max_frame_size)
        mine: _Session | None = None
        try:
            try:
                async with asyncio.timeout(self.handshake_seconds):
                    why = await self._handshake(end, reader, writer)
            except TimeoutError:
                why = f"no HELLO within {self.handshake_seconds:g} s"
            if why is None:
                mine = await self._claim(peer, writer)
                await self.store.start_session()
                log.info("connection from %s (output offset %d, committed %d)", peer,
                         self.store.output_offset, self.store.committed_offset)
                why = await self._serve_session(end, reader, writer)
        except SinkStorageError as e:
            log.error("%s; stopping (a restart recovers)", e)
            why = "storage failed"
            if not self.failed.done():
                self.failed.set_result(e)
        except SinkUnavailableError as e:
            # The store lost track of what it holds (a database connection lost mid-way):
            # the coordinator reconnects and lists the prepared transactions again.
            why = str(e)
        except ssl.SSLError as e:  # an altered, replayed or cut TLS record
            why = describe_tls_error(e)
        except (OSError, asyncio.IncompleteReadError) as e:
            why = f"connection lost ({e.__class__.__name__}: {e})"
        except asyncio.CancelledError:
            writer.close()
            if mine is not None and mine.replaced:
                why = "replaced by a newer connection"
            else:
                # The sink is stopping. Ending quietly rather than re-raising: asyncio's
                # start_server (3.11) asks a cancelled handler task for its exception,
                # which raises again and logs a traceback for a routine stop.
                log.info("connection from %s ended: the sink is stopping", peer)
                return
        finally:
            if mine is not None:
                mine.ended.set()
                self._door.left(mine)
        await _close(writer)
        log.info("connection from %s ended: %s", peer, why)

    async def _handshake(self, end: SinkEnd, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> str | None:
        """Reads up to the peer's HELLO and answers it; None once it is accepted, else why
        the connection ends (the reason is sent in ERROR where the protocol says so)."""
        while (step := end.next_step()) is NEED_DATA:
            end.receive_data(await reader.read(1 << 16))
        if isinstance(step, Accepted):
            writer.write(step.reply)
            await writer.drain()
            return None
        assert isinstance(step, Ended)  # a frame comes only after the HELLO
        writer.write(step.last)
        return step.reason

    async def _claim(self, peer: Any, writer: asyncio.StreamWriter) -> _Session:
        """This connection becomes the one served (``SinkDoor``); the one it replaces
        ends first (its request in progress, which may wait for a database, is
        cancelled)."""
        async with self._claiming:
            mine = _Session(peer, writer, asyncio.current_task())
            old = self._door.admit(mine)
            if old is not None:
                log.warning("a new connection from %s replaces the one from %s", peer,
                            old.peer)
                old.replaced = True
                old.writer.close()
                if old.task is not None:
                    old.task.cancel()
                await old.ended.wait()
            return mine

    async def _serve_session(self, end: SinkEnd, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> str:
        while True:
            while (step := end.next_step()) is not NEED_DATA:
                if isinstance(step, Ended):
                    writer.write(step.last)
                    return step.reason
                assert isinstance(step, Frame)  # HELLO is accepted once, before
                try:
                    replies = await answer(self.store, step.event, self.counts)
                except OSError as e:
                    raise SinkStorageError(f"the sink's storage failed: {e}") from None
                except (SinkRefusedError, SinkStateError) as e:
                    ended = end.refused(e)
                    writer.write(ended.last)
                    return ended.reason
                writer.write(end.send(replies))
            await writer.drain()
            # Idle between frames is fine (a coordinator with nothing to commit); the
            # rest of a frame begun must come in time.
            try:
                async with asyncio.timeout(self.handshake_seconds if end.partial_frame
                                           else None):
                    data = await reader.read(1 << 16)
            except TimeoutError:
                return (f"the rest of a frame not sent within {self.handshake_seconds:g} s")
            end.receive_data(data)


async def _close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
        await writer.wait_closed()
    except OSError:
        pass  # the peer is gone already


#: What serves one accepted connection.
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def listen(address: Address, handler: Handler, tls: Tls | None,
                 handshake_seconds: float, *, start_serving: bool = True) -> asyncio.Server:
    """A server for a sink's connections on ``address``, over TLS with ``tls``. Without
    ``start_serving`` the address is only bound, so that one in use is refused before
    the store is opened; ``Server.start_serving`` then takes connections."""
    if tls is None:
        return await asyncio.start_server(handler, address.host, address.port,
                                          start_serving=start_serving)
    return await tls.start_server(
        handler, address.host, address.port, timeout=handshake_seconds,
        refused=lambda why: log.warning("refused a connection: %s", why),
        start_serving=start_serving)
