"""Group commit: inputs (self-calls, Impulses, calls arriving on links) wait in
``pending``; a commit packs whatever has gathered into one data record, writes and
fsyncs it, and only then delivers it to the binding and acknowledges it to senders. The
rule (what a record holds, what its durability lets go) is ``group_commit``'s, without
I/O; this module writes and syncs between its two steps.

Where the commit runs is a choice (``Coordinator.fsync_in_thread``). By default it runs
on the event loop, in the callback of the read that brought the inputs
(``after_burst``): one commit per read burst, with no task to wake and no thread hop.
What arrives meanwhile waits in the kernel's socket buffers, and the next record packs
it, so batching happens as it would with a thread, without a thread's hand-off each way
(which measured slower: bench/README.md, "Figures behind choices in the code"). The
thread is kept for active/active replicas (a primary's heartbeat must go on during a
slow fsync, or standbys take it for dead) and for a coordinator whose own outputs must
not wait for its fsyncs; there the ``committer`` task commits, woken by ``wake``. That
task also commits, in either mode, what gathers outside a read (a recovery's
self-calls, a checkpoint the binding asks for).

What the loop does next (switch the log, take a record, or nothing) and when inbound
links pause and resume (back-pressure, ``regulate``) are ``commit_plan``'s decisions,
without I/O; this module does what they say. The binding itself is never paused (see
``reading``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..logstore import LogWriter
from . import actions, checkpoints
from .commit_plan import MAX_PENDING, Links, Move, links, next_move
from .group_commit import TakenRecord
from .phase import Phase

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["MAX_BATCH_BYTES", "MAX_PENDING", "after_burst", "commit_batch", "committer",
           "regulate"]

MAX_BATCH_BYTES = 1 << 20

async def committer(c: Coordinator) -> None:
    """Runs while live: commits what gathers outside a read (all of it when the fsync
    runs in a thread), and moves to the next log when asked."""
    assert c.send is not None
    while True:
        await c.wake.wait()
        c.wake.clear()
        if c.stopping:
            return  # a failed write or a stop: nothing more is committed
        core = c.core
        while (move := next_move(len(core.group.pending), core.ckpt.switch_wanted)
               ) is not Move.IDLE:
            if move is Move.SWITCH:
                checkpoints.switch_log(c)
                continue
            await commit_batch(c)
            regulate(c)
        await c.send.drain()


def after_burst(c: Coordinator) -> None:
    """After a read from the binding or a link: commit what it brought, on the loop,
    right now (or wake the committer, if the fsync runs in a thread or a write is in
    progress). An error stops the coordinator with one line."""
    actions.run(c)
    core = c.core
    if core.phase is not Phase.LIVE or c.stopping:
        return
    try:
        if c.fsync_in_thread or c.write_lock.locked():
            if core.group.pending:
                c.wake.set()
        else:
            while (move := next_move(len(core.group.pending), core.ckpt.switch_wanted)
                   ) is not Move.IDLE:
                if move is Move.SWITCH:
                    checkpoints.switch_log(c)
                    continue
                _written(c, *_write(c))
        regulate(c)
    except Exception as err:  # in a callback: stop with one line
        c.fail(err)


async def commit_batch(c: Coordinator) -> None:
    """Log what is pending (up to ``MAX_BATCH_BYTES``) as one record, then deliver it."""
    writer = c.writer
    assert writer is not None
    async with c.write_lock:  # taken under the lock: one record at a time
        record = c.core.take(MAX_BATCH_BYTES, c.sink.epoch)
        began = time.perf_counter()
        if c.fsync_in_thread:
            await asyncio.to_thread(c.sink.write, writer, record.disk)
        else:
            c.sink.write(writer, record.disk)
        c.stats.sync_seconds.observe(time.perf_counter() - began)
    _written(c, record, writer)


def _write(c: Coordinator) -> tuple[TakenRecord, LogWriter]:
    writer = c.writer
    assert writer is not None
    record = c.core.take(MAX_BATCH_BYTES, c.sink.epoch)
    began = time.perf_counter()
    c.sink.write(writer, record.disk)
    c.stats.sync_seconds.observe(time.perf_counter() - began)
    return record, writer


def _written(c: Coordinator, record: TakenRecord, writer: LogWriter) -> None:
    """The record is durable: deliver it and acknowledge its calls (the core's
    actions)."""
    stats = c.stats
    stats.records += 1
    stats.syncs += 1
    stats.log_bytes += len(record.disk)
    stats.inputs += record.count
    c.core.durable(record, writer.size)
    actions.run(c)


def regulate(c: Coordinator) -> None:
    """Pause the inbound links while the binding's buffer is full or the log is behind;
    resume them once neither holds (``commit_plan.links``)."""
    send = c.send
    if send is None:
        return
    transport = send.transport
    full = transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]
    todo = links(full, len(c.core.group.pending), c.drain_wait is not None, MAX_PENDING)
    if todo is Links.RESUME:
        c.link_server.resume()
    elif todo is not Links.HOLD:
        c.link_server.pause()
        if todo is Links.PAUSE_AND_DRAIN:
            c.drain_wait = c.spawn(_after_drain(c))


async def _after_drain(c: Coordinator) -> None:
    assert c.send is not None
    try:
        await c.send.drain()
    except ConnectionError:
        return  # the binding went away: its reader says so and stops the coordinator
    finally:
        c.drain_wait = None
    regulate(c)
