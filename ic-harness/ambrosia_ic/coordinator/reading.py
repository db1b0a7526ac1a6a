"""Reading the binding: its bytes become messages, each handled in order.

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
    InitialMessage,
    MessageStreamDecoder,
    OutgoingRpc,
    RpcBatch,
    TakeCheckpoint,
)

from . import checkpoints, outputs

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["EXIT_BINDING_LOST", "EXIT_MALFORMED", "read_binding"]

EXIT_BINDING_LOST = 1
EXIT_MALFORMED = 2


async def read_binding(c: Coordinator, reader: asyncio.StreamReader) -> None:
    decoder = MessageStreamDecoder()
    while True:
        data = await reader.read(1 << 16)
        if not data:
            c.finish(EXIT_BINDING_LOST, "the binding closed its connection; exiting "
                     "(restart the coordinator and the binding together to recover)")
            return
        try:
            decoder.receive_data(data)
            for ev in decoder.events():
                on_message(c, ev)
        except RemoteProtocolError as err:
            c.finish(EXIT_MALFORMED, f"binding sent malformed bytes: {err}")
            return


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
