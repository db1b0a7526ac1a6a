"""Reading the binding: its bytes become messages, each handled in order. Plain RPCs
stay bytes (``frames``); everything else is decoded.

Outputs go to routing, checkpoint streams to the collector, and the InitialMessage to
the first start that waits for it. Malformed bytes or a message a binding must not send
end the coordinator with one line saying so.

``BindingReader`` is the receive connection's protocol: each read is parsed, routed and
committed in its own callback (``commit.after_burst``), with no task between the socket
and the log. It never pauses the binding: the binding may be waiting for room to write
while the coordinator waits for it to read what was delivered, and only reading both
ways at once keeps that from locking up (back-pressure goes to the links instead).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from ambrosia_py.errors import RemoteProtocolError, UnexpectedMessageError
from ambrosia_py.wire import (
    AttachTo,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    Incomplete,
    InitialMessage,
    MessageStreamDecoder,
    OutgoingRpc,
    RpcBatch,
    TakeCheckpoint,
    decode_zz32,
)

from . import checkpoints, commit, outputs
from .frames import batch_frames, outgoing_frames

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["EXIT_BINDING_LOST", "EXIT_MALFORMED", "BindingReader"]

EXIT_BINDING_LOST = 1
EXIT_MALFORMED = 2


# A partial frame at the end of a read is kept for the bytes path up to this size; a
# bigger one (a large call or checkpoint) goes to the decoder, which joins its chunks once.
_KEEP_PARTIAL = 1 << 20
_LOST = ("the binding closed its connection; exiting "
         "(restart the coordinator and the binding together to recover)")


class BindingReader(asyncio.Protocol):
    """Reads until the binding goes away. Plain RPC frames take the bytes path
    (``frames.outgoing_frames``); from the first frame that is anything else until the
    decoder is back at a frame boundary, the stream goes through the general decoder."""

    def __init__(self, c: Coordinator) -> None:
        self.c = c
        self.decoder = MessageStreamDecoder()
        self.limit = self.decoder.max_frame_size
        self.names: dict[bytes, str] = {}
        self.rest = b""
        self.transport: asyncio.Transport | None = None
        self.failed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.failed:
            return
        c = self.c
        try:
            self._parse(data)
        except RemoteProtocolError as err:
            self._fail(EXIT_MALFORMED, f"binding sent malformed bytes: {err}")
            return
        except Exception as err:  # any other error: one line, as for a task
            self.failed = True
            c.fail(err)
            return
        finally:
            # Before any output of this read leaves the process.
            if c.digest is not None:
                c.digest.flush()
        for link in c.links.values():
            link.flush()
        commit.after_burst(c)

    def eof_received(self) -> bool:
        self._fail(EXIT_BINDING_LOST, _LOST)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(EXIT_BINDING_LOST, _LOST)

    def _fail(self, code: int, message: str) -> None:
        if not self.failed:
            self.failed = True
            self.c.finish(code, message)
            if self.transport is not None:
                self.transport.close()

    def _parse(self, data: bytes) -> None:
        c = self.c
        decoder = self.decoder
        if decoder.at_boundary:
            buf = self.rest + data if self.rest else data
            limit, names = self.limit, self.names
            got, pos = outgoing_frames(buf, 0, limit, names)
            while True:
                outputs.route_frames(c, got)
                if pos >= len(buf) or (batch := batch_frames(buf, pos, limit, names)) is None:
                    break
                got, pos = batch
                more, pos = outgoing_frames(buf, pos, limit, names)
                got += more
            self.rest = buf[pos:]
            if self.rest and not _partial(self.rest, self.limit):
                decoder.receive_data(self.rest)
                self.rest = b""
        else:
            decoder.receive_data(data)
        if not decoder.at_boundary:
            for ev in decoder.drain():
                on_message(c, ev)


def _partial(rest: bytes, limit: int) -> bool:
    """Whether ``rest`` is the start of a frame of at most ``_KEEP_PARTIAL`` bytes that
    the next read may complete (anything else goes to the decoder)."""
    try:
        size, body = decode_zz32(rest, 0)
    except Incomplete:
        return len(rest) < 5
    except RemoteProtocolError:
        return False
    return 0 < size <= min(limit, _KEEP_PARTIAL) and body + size > len(rest)


def on_message(c: Coordinator, ev: Any) -> None:
    """One message from the binding.

    Raises:
        UnexpectedMessageError: a message a binding does not send, or one out of turn.
    """
    t = type(ev)
    if t is OutgoingRpc:
        outputs.route(c, ev)
    elif t is RpcBatch:
        for rpc in ev.rpcs:
            outputs.route(c, rpc)
    elif t is CheckpointChunk:
        c.checkpoints.chunk(ev.data)
    elif t is Checkpoint:
        checkpoints.begin(c, ev)
    elif t is CheckpointEnd:
        c.checkpoints.end()
    elif t is AttachTo:
        if ev.destination not in ("", c.name):
            outputs.link_to(c, ev.destination)
    elif t is TakeCheckpoint:
        checkpoints.request_checkpoint(c)
    elif t is InitialMessage:
        if c.initial is None or c.initial.done():
            raise UnexpectedMessageError("an InitialMessage outside a first start")
        c.initial.set_result(ev)
    else:
        raise UnexpectedMessageError(f"{t.__name__} from a binding")
