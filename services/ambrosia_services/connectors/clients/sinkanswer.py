"""What a 2PC sink answers to each frame of a linked coordinator, over any store, with no
socket: the decision half of ``sinkserver.SinkServer``, which only moves the bytes.

``answer`` makes the store's durable effects first and returns the frames to send back.
Its store calls are the store interface's coroutines; a store whose calls never wait
(the file store) lets a caller without an event loop run it to its end at once
(``run_now``), which is how the deterministic simulator drives the real sink.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from ambrosia_services.connectors import (
    Ack,
    EosMessage,
    Event,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Phase1,
    Phase2,
    ReplyUncommitted,
    TwoPCReply,
    WorkersLeft,
)

from .sinkmetrics import SinkCounts
from .sinkport import DATA_STREAM_ID, SinkStore

__all__ = ["SinkRefusedError", "answer", "run_now"]

log = logging.getLogger("ambrosia_services.connectors.clients.sinkserver")
_T = TypeVar("_T")


class SinkRefusedError(Exception):
    """The peer asked for something this sink does not do; the reason goes in ERROR."""


async def answer(store: SinkStore, event: Event, counts: SinkCounts) -> list[Event]:
    """What the sink sends for ``event`` (its durable effects happen first).

    Raises:
        SinkRefusedError: a stream other than 1, or a frame a sink does not take.
        SinkStateError: the store refuses the step (a duplicate, an unprepared Phase2).
    """
    match event:
        case Notify(stream_id) if stream_id != DATA_STREAM_ID:
            raise SinkRefusedError(f"this sink takes stream {DATA_STREAM_ID} only, not "
                                   f"{stream_id}")
        case Notify(stream_id):
            return [NotifyAck(True, stream_id, store.output_offset)]
        case Message(_, message_id, payload):
            store.write(message_id, payload)
            return []
        case EosMessage(stream_id):
            return [Ack(1, ((stream_id, store.output_offset),))]
        case ListUncommitted(rtag):
            return [ReplyUncommitted(rtag, await store.uncommitted())]
        case Phase1(txn_id, where):
            began = time.perf_counter()
            vote = await store.prepare(txn_id, [(w.stream_id, w.start, w.end) for w in where])
            if not vote.commit:
                counts.refused += 1
                log.warning("Phase1 %r: voting no: %s", txn_id, vote.reason)
            else:
                counts.prepared += 1
                counts.prepare_seconds.observe(time.perf_counter() - began)
            return [TwoPCReply(txn_id, vote.commit)]
        case Phase2(txn_id, commit=True):
            began, before = time.perf_counter(), store.committed_offset
            if await store.commit(txn_id):
                counts.committed += 1
                counts.committed_bytes += store.committed_offset - before
                counts.commit_seconds.observe(time.perf_counter() - began)
                log.debug("committed %r up to %d", txn_id, store.committed_offset)
            return []
        case Phase2(txn_id, commit=False):
            counts.aborted += 1
            await store.abort(txn_id)
            log.info("aborted %r; output offset back to %d", txn_id, store.output_offset)
            return []
        case WorkersLeft(_, workers):
            log.info("workers left: %s", ", ".join(workers) or "(none)")
            return []
    raise SinkRefusedError(f"this sink does not handle {type(event).__name__}")


def run_now(coro: Coroutine[Any, Any, _T]) -> _T:
    """The value of a coroutine that never waits (a store call of the file store).

    Raises:
        RuntimeError: it waited for something (it needs an event loop).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the coroutine waited: it needs an event loop")
