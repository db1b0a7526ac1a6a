"""Reading the binding: its bytes become messages, each handled in order. Plain RPCs
stay bytes (``frames``); everything else is decoded.

Outputs go to routing, checkpoint streams to the collector, and the InitialMessage to
the first start that waits for it. Malformed bytes or a message a binding must not send
end the coordinator with one line saying so.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

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

from . import checkpoints, outputs
from .frames import outgoing_frames

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["EXIT_BINDING_LOST", "EXIT_MALFORMED", "read_binding"]

EXIT_BINDING_LOST = 1
EXIT_MALFORMED = 2


# A partial frame at the end of a read is kept for the bytes path up to this size; a
# bigger one (a large call or checkpoint) goes to the decoder, which joins its chunks once.
_KEEP_PARTIAL = 1 << 20


async def read_binding(c: Coordinator, reader: asyncio.StreamReader) -> None:
    """Reads until the binding goes away. Plain RPC frames take the bytes path
    (``frames.outgoing_frames``); from the first frame that is anything else until the
    decoder is back at a frame boundary, the stream goes through the general decoder."""
    decoder = MessageStreamDecoder()
    limit = decoder.max_frame_size
    names: dict[bytes, str] = {}
    rest = b""
    while True:
        data = await reader.read(1 << 16)
        if not data:
            c.finish(EXIT_BINDING_LOST, "the binding closed its connection; exiting "
                     "(restart the coordinator and the binding together to recover)")
            return
        try:
            if decoder.at_boundary:
                buf = rest + data if rest else data
                got, pos = outgoing_frames(buf, 0, limit, names)
                for f in got:
                    outputs.route_frame(c, *f)
                rest = buf[pos:]
                if rest and not _partial(rest, limit):
                    decoder.receive_data(rest)
                    rest = b""
            else:
                decoder.receive_data(data)
            if not decoder.at_boundary:
                for ev in decoder.drain():
                    on_message(c, ev)
        except RemoteProtocolError as err:
            c.finish(EXIT_MALFORMED, f"binding sent malformed bytes: {err}")
            return
        finally:
            if c.digest is not None:
                c.digest.flush()


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
