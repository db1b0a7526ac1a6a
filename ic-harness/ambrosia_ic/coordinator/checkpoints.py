"""Taking a checkpoint: the one path every flow uses to ask the binding for one, collect
what it streams back, and write it.

The binding answers a request (TakeCheckpoint, TakeBecomingPrimaryCheckpoint,
UpgradeTakeCheckpoint) with a Checkpoint message, chunks, and the end of the stream. The
outputs it sent before the Checkpoint message came from records before the checkpoint,
so the snapshot of unacknowledged outputs stored with it is taken exactly then.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ambrosia_py.errors import UnexpectedMessageError
from ambrosia_py.wire import (
    Checkpoint,
    Message,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    UpgradeTakeCheckpoint,
    encode_control_record,
)

from ..logstore import DigestWriter, digest_path, write_checkpoint
from ..recovery import coordinator_state
from . import outputs
from .checkpoint_plan import Event
from .phase import Phase

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["CheckpointCollector", "CheckpointData", "ask", "begin", "collect", "remove_unkept",
           "request_checkpoint", "save", "switch_log"]

# (the binding's Checkpoint message, its raw chunks, the outputs snapshot)
CheckpointData = tuple[bytes, list[bytes], dict[str, Any]]


class CheckpointCollector:
    """Gathers the one checkpoint asked for at a time from the binding's messages."""

    def __init__(self) -> None:
        self._expect: tuple[int, asyncio.Future[CheckpointData]] | None = None
        self._parts: CheckpointData | None = None

    def expect(self, n: int) -> asyncio.Future[CheckpointData]:
        """Checkpoint ``n`` was asked for; the future gets it when its stream ends."""
        fut: asyncio.Future[CheckpointData] = asyncio.get_running_loop().create_future()
        self._expect = (n, fut)
        return fut

    @property
    def expecting(self) -> int | None:
        """The number of the checkpoint asked for, if one is."""
        return None if self._expect is None else self._expect[0]

    def begin(self, ev: Checkpoint, outputs: dict[str, Any]) -> int:
        """The Checkpoint message came; returns the number of the checkpoint it starts."""
        assert self._expect is not None
        self._parts = (ev.encode(), [], outputs)
        return self._expect[0]

    def chunk(self, data: bytes) -> None:
        assert self._parts is not None
        self._parts[1].append(data)

    def end(self) -> None:
        parts, self._parts = self._parts, None
        assert parts is not None and self._expect is not None
        fut = self._expect[1]
        self._expect = None
        fut.set_result(parts)


def ask(c: Coordinator, n: int, request: Message) -> asyncio.Future[CheckpointData]:
    """Send ``request`` for checkpoint ``n`` without waiting (the committer asks between
    two records and must not pause)."""
    fut = c.checkpoints.expect(n)
    if isinstance(request, (TakeBecomingPrimaryCheckpoint, UpgradeTakeCheckpoint)):
        c.binding_primary = True  # it is primary once it has sent this checkpoint
    c.deliver(encode_control_record(c.cid, request))
    return fut


async def collect(c: Coordinator, n: int, request: Message) -> CheckpointData:
    """Ask the binding for checkpoint ``n`` with ``request`` and wait for all of it."""
    fut = ask(c, n, request)
    assert c.send is not None
    await c.send.drain()
    return await fut


async def save(c: Coordinator, d: Path, n: int, data: CheckpointData,
               position: tuple[int, dict[str, int]] | None = None) -> None:
    """Write checkpoint ``n`` of ``d`` durably. ``position`` is ``(next_seq, inputs)``
    when the checkpoint was asked for (default: now)."""
    message, chunks, outputs = data
    next_seq, inputs = position if position is not None else (c.next_seq, c.inputs)
    state = coordinator_state(next_seq, inputs, outputs)
    await asyncio.to_thread(write_checkpoint, d, n, state, message, chunks)


async def remove_unkept(c: Coordinator) -> None:
    await asyncio.to_thread(c.sink.remove_unkept, c.dir, c.reg.keep_checkpoints, c.damaged)


def begin(c: Coordinator, ev: Checkpoint) -> None:
    """The binding's Checkpoint message: from here on its outputs belong to the next
    interval, so the replay digest moves on too.

    Raises:
        UnexpectedMessageError: no checkpoint was asked for, or the first start's
            InitialMessage has not come yet.
    """
    if c.checkpoints.expecting is None:
        raise UnexpectedMessageError("a Checkpoint the coordinator did not ask for")
    if c.initial is not None and not c.initial.done():
        raise UnexpectedMessageError("a Checkpoint before the InitialMessage")
    n = c.checkpoints.begin(ev, outputs.snapshot(c))
    if c.digest is not None:
        c.digest.close()
        c.digest = None
    if c.sink.writes_digests:
        c.digest = DigestWriter(digest_path(c.dir, n), keep=0)
    c.digest_skip = 0


def request_checkpoint(c: Coordinator) -> None:
    """The binding asked for a checkpoint: the committer takes one between records (see
    ``checkpoint_plan`` for one asked while another is being taken)."""
    if c.phase is not Phase.LIVE:
        return
    if c.ckpt.on(Event.ASKED):
        c.wake.set()


def switch_log(c: Coordinator) -> None:
    """Runs in the committer between records: later records go to the next log; a
    standalone coordinator checkpoints the state at its start."""
    n = c.log_n + 1
    new = c.sink.next_log(c.dir, n, c.writer)
    if c.sink.checkpoints_on_switch:
        c.ckpt.on(Event.SWITCHED)
        position = (c.next_seq, dict(c.inputs))
        fut = ask(c, n, TakeCheckpoint())
        c.spawn(_finish(c, n, position, fut))
    else:
        c.ckpt.on(Event.SWITCHED_ONLY)
    old, c.writer, c.log_n = c.writer, new, n
    if old is not None:
        old.close()


async def _finish(c: Coordinator, n: int, position: tuple[int, dict[str, int]],
                  fut: asyncio.Future[CheckpointData]) -> None:
    await save(c, c.dir, n, await fut, position)
    await remove_unkept(c)
    if c.ckpt.on(Event.SAVED) and c.phase is Phase.LIVE:
        c.wake.set()  # the one asked for meanwhile
