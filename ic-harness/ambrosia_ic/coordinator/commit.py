"""Group commit: inputs (self-calls, Impulses, calls arriving on links) wait in
``pending``; the committer packs whatever has gathered into one data record, writes and
fsyncs it off the event loop, and only then delivers it to the binding and acknowledges
it to senders. While one fsync runs the next batch gathers, so throughput does not pay
one fsync per call.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..logstore import encode_disk_record
from . import checkpoints, outputs

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["MAX_BATCH_BYTES", "commit_batch", "committer"]

MAX_BATCH_BYTES = 1 << 20


async def committer(c: Coordinator) -> None:
    """Runs while live: commits what gathers, and moves to the next log when asked."""
    assert c.send is not None
    while True:
        await c.wake.wait()
        c.wake.clear()
        while c.pending or c.switch_requested:
            if c.switch_requested:
                checkpoints.switch_log(c)
                continue
            await commit_batch(c)
        await c.send.drain()


async def commit_batch(c: Coordinator) -> None:
    """Log what is pending (up to ``MAX_BATCH_BYTES``) as one record, then deliver it."""
    batch: list[bytes] = []
    size = 0
    inputs = dict(c.inputs)
    senders: set[str] = set()
    pending = c.pending
    while pending and size < MAX_BATCH_BYTES:
        key, seq, body = pending.popleft()
        batch.append(body)
        size += len(body)
        if key is not None and seq is not None:
            inputs[key] = max(inputs.get(key, 0), seq)
            senders.add(key)
    seq_id = c.next_seq
    disk, wire = encode_disk_record(c.cid, seq_id, b"".join(batch), inputs, c.sink.epoch)
    writer = c.writer
    assert writer is not None and c.send is not None
    async with c.write_lock:
        await asyncio.to_thread(c.sink.write, writer, disk)
    c.next_seq = seq_id + 1
    c.inputs = inputs
    c.deliver(wire)
    c.last_delivered = seq_id
    outputs.trim_self(c)
    c.link_server.acknowledge({s: inputs[s] for s in senders if s != c.name})
    if writer.size >= c.trigger_bytes and not c.ckpt_in_flight:
        c.switch_requested = True
