"""Taking a checkpoint: the one path every flow uses to ask the binding for one, wait
for what it streams back, and write it.

The binding answers a request (TakeCheckpoint, TakeBecomingPrimaryCheckpoint,
UpgradeTakeCheckpoint) with a Checkpoint message, chunks, and the end of the stream;
the core gathers them (with the snapshot of unacknowledged outputs, taken as the
Checkpoint message comes) and hands them over whole.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ambrosia_core.wire import (
    Message,
)

from ..logstore import remove_checkpoint_temps, write_checkpoint
from ..recovery import coordinator_state, latest_checkpoint
from . import actions
from .core import CheckpointData, CheckpointReceived, Position

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["CheckpointData", "ask", "collect", "remove_stale_temps", "remove_unkept", "save",
           "say_removed", "switch_log", "wait_for"]


def wait_for(c: Coordinator) -> asyncio.Future[CheckpointReceived]:
    """The future that gets the checkpoint about to be asked for, when its stream ends
    (the core's ``CheckpointReceived``)."""
    fut: asyncio.Future[CheckpointReceived] = asyncio.get_running_loop().create_future()
    c.checkpoint_wait = fut
    return fut


def ask(c: Coordinator, n: int, request: Message) -> asyncio.Future[CheckpointReceived]:
    """Send ``request`` for checkpoint ``n`` without waiting."""
    fut = wait_for(c)
    c.core.ask_checkpoint(n, request)
    actions.run(c)
    return fut


async def collect(c: Coordinator, n: int, request: Message) -> CheckpointReceived:
    """Ask the binding for checkpoint ``n`` with ``request`` and wait for all of it."""
    fut = ask(c, n, request)
    assert c.send is not None
    await c.send.drain()
    return await fut


async def save(c: Coordinator, d: Path, n: int, data: CheckpointData,
               position: Position) -> None:
    """Write checkpoint ``n`` of ``d`` durably. ``position`` is ``(next_seq, inputs)``
    when the checkpoint was asked for (its ``CheckpointReceived`` says)."""
    message, chunks, outputs = data
    next_seq, inputs = position
    state = coordinator_state(next_seq, inputs, outputs)
    began = time.perf_counter()
    await asyncio.to_thread(write_checkpoint, d, n, state, message, chunks)
    stats = c.stats
    stats.checkpoints += 1
    stats.checkpoint_seconds.observe(time.perf_counter() - began)
    stats.checkpoint_bytes.observe(len(message) + sum(len(chunk) for chunk in chunks))


async def remove_unkept(c: Coordinator, *, temps_from: int | None = None) -> None:
    """Once a new checkpoint is durable: remove what no kept checkpoint needs; with
    ``temps_from``, also what writers killed while writing a checkpoint numbered from
    there up to the newest left behind (``remove_stale_temps``)."""
    await asyncio.to_thread(c.sink.remove_unkept, c.dir, c.reg.keep_checkpoints, c.damaged)
    if temps_from is not None:
        await remove_stale_temps(c, temps_from, await asyncio.to_thread(latest_checkpoint, c.dir))


async def remove_stale_temps(c: Coordinator, first: int = 1, through: int | None = None) -> None:
    """Remove the temporary files of checkpoints ``first`` (through ``through``) that a
    writer killed while writing one left in the coordinator's directory, in one line.
    Call only where no live process can be writing one of those checkpoints: the caller
    holds the lock that makes it their only writer."""
    say_removed(c, await asyncio.to_thread(remove_checkpoint_temps, c.dir, first, through))


def say_removed(c: Coordinator, removed: list[tuple[str, int]]) -> None:
    """One line for the temporary files ``remove_checkpoint_temps`` removed, if any."""
    if removed:
        c.log("removed what a checkpoint write cut short left behind: "
              + ", ".join(f"{name} ({size} bytes)" for name, size in removed))


def switch_log(c: Coordinator) -> None:
    """Runs in the committer between records: later records go to the next log; a
    standalone coordinator checkpoints the state at its start (the committer asks and
    must not pause: the checkpoint is saved by a task)."""
    n = c.log_n + 1
    new = c.sink.next_log(c.dir, n, c.writer)
    checkpoint = c.sink.checkpoints_on_switch
    fut = wait_for(c) if checkpoint else None
    c.core.switch_log(n, checkpoint)
    actions.run(c)
    if fut is not None:
        c.spawn(_finish(c, n, fut))
    old, c.writer, c.log_n = c.writer, new, n
    if old is not None:
        old.close()


async def _finish(c: Coordinator, n: int, fut: asyncio.Future[CheckpointReceived]) -> None:
    got = await fut
    await save(c, c.dir, n, got.data, got.position)
    await remove_unkept(c, temps_from=1)  # the only writer of its directory (its lock)
    c.core.checkpoint_saved()
    actions.run(c)
