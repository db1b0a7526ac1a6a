"""The 2PC file sink server: the worker end of a Wallaroo sink link, writing a file.

It speaks as Wallaroo's own 2PC file sink did (OK(500) to HELLO "v0.0.1" with the right
cookie; only stream 1; NOTIFY_ACK with the output offset; each data message id must be
the output offset; Phase1 votes yes only for ``[committed offset, <= written)``; Phase2
settles; ACK(1, [(1, output offset)]) for an EOS), with two differences: an abort never
cuts below the committed offset, and a commit may leave written bytes after the range
pending. The durable side is ``sinkstore.SinkStore``.

One connection at a time, because two writers to one output would interleave their
offsets: a connection counts once its HELLO is accepted (within ``--handshake-timeout``
seconds, or it is closed), and a newer accepted one replaces it. A linked peer may be idle
between frames for as long as it likes, but the rest of a frame it began must come within
the same time. File I/O runs on the
event loop thread; nothing is answered before it is durable anyway.

    ambrosia-sink --listen 127.0.0.1:7200 --dir DIR [--cookie C]

(or ``python -m ambrosia_services.connectors.clients.filesink``)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import attrs

from ambrosia_core.addresses import Address, address_argument
from ambrosia_core.wire import NEED_DATA
from ambrosia_services.connectors import (
    DEFAULT_MAX_FRAME_SIZE,
    Ack,
    ConnectionClosed,
    ConnectorConnection,
    ConnectorProtocolError,
    EosMessage,
    ErrorFrame,
    Event,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Role,
    TwoPCReply,
    WorkersLeft,
)

from .errors import ClientError, SinkStateError, SinkStorageError
from .sinkstore import DATA_STREAM_ID, SinkStore

__all__ = ["SINK_CREDITS", "FileSink", "main"]

SINK_CREDITS = 500  # what Wallaroo's 2PC file sink granted; its peers ignore credits
HANDSHAKE_SECONDS = 5.0  # how long a new connection may take to send its HELLO
log = logging.getLogger(__name__)


class _RefusedError(Exception):
    """The peer asked for something this sink does not do; the reason goes in ERROR."""


@attrs.define
class _Session:
    """The authenticated connection being served."""

    peer: Any
    writer: asyncio.StreamWriter
    ended: asyncio.Event = attrs.Factory(asyncio.Event)


class FileSink:
    """Serves ``store`` to one sink link at a time.

    A connection holds the sink only once its HELLO was accepted (the right version and
    cookie), which must come within ``handshake_seconds``: a stranger that connects and
    says nothing is closed then, and never blocks the coordinator's link. A newer
    accepted connection replaces the one being served (a coordinator that reconnected,
    or took over from a fenced one, is the live writer; the old connection is closed and
    its unprepared bytes dropped), so two writers never interleave their offsets.

    Made inside a running event loop.

    Args:
        store: the recovered output directory.
        cookie: the cookie a HELLO must carry (b"" = none).
        max_frame_size: the largest frame accepted.
        handshake_seconds: how long a new connection may take to send its HELLO.
    """

    def __init__(
        self,
        store: SinkStore,
        *,
        cookie: bytes = b"",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        handshake_seconds: float = HANDSHAKE_SECONDS,
    ) -> None:
        self.store = store
        self.cookie = cookie
        self.max_frame_size = max_frame_size
        self.handshake_seconds = handshake_seconds
        self._session: _Session | None = None
        self._claiming = asyncio.Lock()
        self.failed: asyncio.Future[SinkStorageError] = asyncio.get_running_loop().create_future()
        """Resolved when the files fail: the sink must stop (a restart recovers)."""

    async def start(self, address: Address) -> asyncio.Server:
        """Listen on ``address`` (port 0 picks a free port: see the server's sockets)."""
        return await asyncio.start_server(self._serve, address.host, address.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        conn = ConnectorConnection(
            Role.WORKER, cookie=self.cookie, twopc=True, max_frame_size=self.max_frame_size
        )
        mine: _Session | None = None
        try:
            try:
                async with asyncio.timeout(self.handshake_seconds):
                    why = await self._handshake(conn, reader, writer)
            except TimeoutError:
                why = f"no HELLO within {self.handshake_seconds:g} s"
            if why is None:
                mine = await self._claim(peer, writer)
                log.info("connection from %s (output offset %d, committed %d)", peer,
                         self.store.output_offset, self.store.committed_offset)
                self.store.start_session()
                why = await self._serve_session(conn, reader, writer)
        except SinkStorageError as e:
            log.error("%s; stopping (a restart recovers from the txn log)", e)
            why = "storage failed"
            if not self.failed.done():
                self.failed.set_result(e)
        except (OSError, asyncio.IncompleteReadError) as e:
            why = f"connection lost ({e.__class__.__name__}: {e})"
        except asyncio.CancelledError:
            # The sink is stopping. Ending quietly rather than re-raising: asyncio's
            # start_server (3.11) asks a cancelled handler task for its exception, which
            # raises again and logs a traceback for a routine stop.
            writer.close()
            log.info("connection from %s ended: the sink is stopping", peer)
            return
        finally:
            if mine is not None:
                mine.ended.set()
                if self._session is mine:
                    self._session = None
        await _close(writer)
        log.info("connection from %s ended: %s", peer, why)

    async def _handshake(self, conn: ConnectorConnection, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> str | None:
        """Reads up to the peer's HELLO and answers it; None once it is accepted, else why
        the connection ends (the reason is sent in ERROR where the protocol says so)."""
        while True:
            try:
                event = conn.next_event()
            except ConnectorProtocolError as e:
                writer.write(conn.take_error_frame())
                return f"protocol error: {e.reason}"
            if event is NEED_DATA:
                conn.receive_data(await reader.read(1 << 16))
                continue
            if isinstance(event, Hello):
                writer.write(conn.send(Ok(SINK_CREDITS)))
                await writer.drain()
                return None
            if isinstance(event, ConnectionClosed):
                return "closed by the peer before its HELLO"
            return f"{type(event).__name__} before HELLO"  # pragma: no cover - the rules refuse it

    async def _claim(self, peer: Any, writer: asyncio.StreamWriter) -> _Session:
        """This connection becomes the one served; the one before it is closed first."""
        async with self._claiming:
            old = self._session
            if old is not None:
                log.warning("a new connection from %s replaces the one from %s", peer,
                            old.peer)
                old.writer.close()
                await old.ended.wait()
            self._session = _Session(peer, writer)
            return self._session

    async def _serve_session(self, conn: ConnectorConnection, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> str:
        ended = False
        while True:
            try:
                for event in conn.events():
                    if isinstance(event, ConnectionClosed):
                        return "closed by the peer"
                    if isinstance(event, ErrorFrame):
                        return f"the peer sent ERROR: {event.reason}"
                    try:
                        replies = self._answer(event)
                    except OSError as e:
                        raise SinkStorageError(f"the sink's files failed: {e}") from None
                    for reply in replies:
                        writer.write(conn.send(reply))
            except ConnectorProtocolError as e:
                writer.write(conn.take_error_frame())
                return f"protocol error: {e.reason}"
            except (_RefusedError, SinkStateError) as e:
                writer.write(conn.send(ErrorFrame(str(e))))
                return f"refused: {e}"
            await writer.drain()
            if ended:
                return "closed by the peer"
            # Idle between frames is fine (a coordinator with nothing to commit); the
            # rest of a frame begun must come in time.
            try:
                async with asyncio.timeout(self.handshake_seconds if conn.partial_frame
                                           else None):
                    data = await reader.read(1 << 16)
            except TimeoutError:
                return (f"the rest of a frame not sent within {self.handshake_seconds:g} s")
            ended = not data
            conn.receive_data(data)

    def _answer(self, event: Event) -> list[Event]:
        """What the sink sends for ``event`` (its durable effects happen first)."""
        store = self.store
        match event:
            case Notify(stream_id) if stream_id != DATA_STREAM_ID:
                raise _RefusedError(
                    f"this sink takes stream {DATA_STREAM_ID} only, not {stream_id}"
                )
            case Notify(stream_id):
                return [NotifyAck(True, stream_id, store.output_offset)]
            case Message(_, message_id, payload):
                store.write(message_id, payload)
                return []
            case EosMessage(stream_id):
                return [Ack(1, ((stream_id, store.output_offset),))]
            case ListUncommitted(rtag):
                return [ReplyUncommitted(rtag, store.uncommitted())]
            case Phase1(txn_id, where):
                vote = store.prepare(txn_id, [(w.stream_id, w.start, w.end) for w in where])
                if not vote.commit:
                    log.warning("Phase1 %r: voting no: %s", txn_id, vote.reason)
                return [TwoPCReply(txn_id, vote.commit)]
            case Phase2(txn_id, commit=True):
                if store.commit(txn_id):
                    log.debug("committed %r up to %d", txn_id, store.committed_offset)
                return []
            case Phase2(txn_id, commit=False):
                store.abort(txn_id)
                log.info("aborted %r; output offset back to %d", txn_id, store.output_offset)
                return []
            case WorkersLeft(_, workers):
                log.info("workers left: %s", ", ".join(workers) or "(none)")
                return []
        raise _RefusedError(f"this sink does not handle {type(event).__name__}")


async def _close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
        await writer.wait_closed()
    except OSError:
        pass  # the peer is gone already


async def _run(args: argparse.Namespace) -> None:
    store = SinkStore(Path(args.dir))
    sink = FileSink(store, cookie=args.cookie.encode(), max_frame_size=args.max_frame_size,
                    handshake_seconds=args.handshake_timeout)
    server = await sink.start(args.listen)
    host, port = server.sockets[0].getsockname()[:2]
    log.info("listening on %s (directory %s, committed %d bytes)",
             Address(host, port), args.dir, store.committed_offset)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        failing: asyncio.Future[Any] = sink.failed
        await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
    store.close()
    if sink.failed.done():
        raise sink.failed.result()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="ambrosia-sink", description="A 2PC file sink for the Wallaroo connector protocol."
    )
    p.add_argument("--listen", type=address_argument(allow_port_zero=True),
                   default=Address("127.0.0.1", 7200), metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:7200; port 0 picks one)")
    p.add_argument("--dir", required=True, help="the output directory (created if missing)")
    p.add_argument("--cookie", default="", help="the cookie a HELLO must carry")
    p.add_argument("--max-frame-size", type=int, default=DEFAULT_MAX_FRAME_SIZE,
                   help="the largest frame accepted, in bytes")
    p.add_argument("--handshake-timeout", type=float, default=HANDSHAKE_SECONDS,
                   metavar="SECONDS", help="how long a new connection may take to send its "
                   "HELLO, and a linked one the rest of a frame it began, before it is "
                   f"closed (default {HANDSHAKE_SECONDS:g})")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ambrosia-sink: %(message)s")
    try:
        asyncio.run(_run(args))
    except (ClientError, OSError) as e:
        print(f"ambrosia-sink: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
