"""Group commit: inputs (self-calls, Impulses, calls arriving on links) wait in
``pending``; the committer packs whatever has gathered into one data record, writes and
fsyncs it, and only then delivers it to the binding and acknowledges it to senders.
While one fsync runs the next batch gathers, so throughput does not pay one fsync per
call.

Where the fsync runs is a choice (``Coordinator.fsync_in_thread``). By default it runs
on the event loop: the loop stops for the fsync, and what arrives meanwhile waits in the
kernel's socket buffers, so the next read takes it all at once and the next record packs
it: the batching happens as it would with a thread. A thread costs a hand-off each way
(a futex wake-up there, a self-pipe write back) and lets the loop spend CPU on small
reads while it waits; on 2 cores shared by four processes that measured worse: forks
1.41x and await p50 0.85x with the fsync on the loop (20,000 forks, 4 interleaved pairs).
The thread is kept for active/active replicas (a primary's heartbeat must go on during a
slow fsync, or standbys take it for dead) and for a coordinator whose own outputs must
not wait for its fsyncs.
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
        if c.fsync_in_thread:
            await asyncio.to_thread(c.sink.write, writer, disk)
        else:
            c.sink.write(writer, disk)
    c.next_seq = seq_id + 1
    c.inputs = inputs
    c.deliver(wire)
    c.last_delivered = seq_id
    outputs.trim_self(c)
    c.link_server.acknowledge({s: inputs[s] for s in senders if s != c.name})
    if writer.size >= c.trigger_bytes and not c.ckpt_in_flight:
        c.switch_requested = True
