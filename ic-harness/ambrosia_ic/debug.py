"""``debug-instance``: the repro and upgrade-test flows, from the files on disk.

Sends checkpoint N and its raw bytes, ``UpgradeService`` when testing an upgrade, then
every record of logs N, N+1, ... It never sends TakeCheckpoint or BecomingPrimary,
persists nothing, and what the binding sends goes nowhere, except that each replayable
output is compared with the digest the live coordinator recorded: the first output that
differs (or is missing, or extra) names the sequence id where the replay diverged.

The sequence id reported is the data record most recently delivered when the differing
output was recorded (in the live run; for an extra output, in this replay). A binding
that finishes one record's outputs before the next record arrives makes it exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, TextIO

import attrs

from ambrosia_core.errors import CoordinatorError, RemoteProtocolError, ReplayDivergenceError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.wire import (
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    InitialMessage,
    MessageStreamDecoder,
    OutgoingRpc,
    RpcBatch,
    UpgradeService,
    check_bytes,
    encode_checkpoint_record,
    encode_control_record,
)

from . import registry
from .binding import BindingPorts
from .logstore import DIGEST_PREFIX, digest_path, file_numbers, is_impulse, read_digest
from .recovery import plan_recovery, replay_records

__all__ = ["DebugResult", "run_debug_instance"]


@attrs.define
class DebugResult:
    status: str  # "ok", "diverged" or "unchecked" (no digest was recorded)
    instance: str
    checkpoint: int
    records_replayed: int = 0
    outputs: int = 0
    recorded_outputs: int = 0
    first_divergence_seq: int | None = None
    detail: str = ""
    torn_tail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class _Replay:
    def __init__(self, recorded: list[tuple[int, int]] | None) -> None:
        self.recorded = recorded
        self.outputs = 0
        self.last_delivered = -1
        self.divergence: ReplayDivergenceError | None = None
        self.activity = asyncio.Event()

    def output(self, rpc: OutgoingRpc) -> None:
        if is_impulse(rpc):
            return
        i = self.outputs
        self.outputs += 1
        if self.recorded is None or self.divergence is not None:
            return
        h = check_bytes(rpc.encode())
        if i >= len(self.recorded):
            self.divergence = ReplayDivergenceError(
                self.last_delivered, f"output {i + 1} was not in the recorded run")
        elif self.recorded[i][0] != h:
            self.divergence = ReplayDivergenceError(
                self.recorded[i][1], f"output {i + 1} differs from the recorded run")

    def finish(self) -> None:
        if self.recorded is None or self.divergence is not None:
            return
        if self.outputs < len(self.recorded):
            self.divergence = ReplayDivergenceError(
                self.recorded[self.outputs][1],
                f"the replay made {self.outputs} outputs, the recorded run "
                f"{len(self.recorded)}",
            )


async def run_debug_instance(
    reg: registry.Registration,
    *,
    checkpoint: int,
    current_version: int,
    testing_upgrade: bool = False,
    receive_port: int | None = None,
    send_port: int | None = None,
    idle_timeout: float | None = None,
    stdout: TextIO,
) -> DebugResult:
    """Serve one binding the replay of checkpoint ``checkpoint``; see the module docstring.

    Returns when the binding closes its connection, or ``idle_timeout`` seconds after the
    last record was sent and the binding last spoke.

    Raises:
        LogCorruptionError: the checkpoint or a log is damaged (a torn tail is not).
        CoordinatorError: the ports cannot be opened, or the binding broke the protocol.
    """
    d = registry.instance_dir(reg, current_version)
    plan = plan_recovery(d, reg.committer_id, checkpoint)
    if plan is None:  # pragma: no cover - plan_recovery raises for a named checkpoint
        raise CoordinatorError(f"no checkpoint {checkpoint} in {d}")
    digests = [k for k in file_numbers(d, DIGEST_PREFIX) if k >= checkpoint]
    recorded: list[tuple[int, int]] | None = None
    if checkpoint in digests:
        recorded = []
        for k in digests:
            recorded += read_digest(digest_path(d, k))
    result = DebugResult("ok", reg.instance_name, checkpoint)
    if plan.torn is not None:
        result.torn_tail = f"{plan.torn[0]} at offset {plan.torn[1]}"
    replay = _Replay(recorded)
    replay.last_delivered = plan.start_seq - 1
    def log(text: str) -> None:
        print(f"ambrosia-ic: {reg.instance_name}: {text}", file=sys.stderr, flush=True)

    ports = BindingPorts(receive_port or reg.receive_port, send_port or reg.send_port, log)
    await ports.open()
    print(f"ambrosia-ic ready: instance={reg.instance_name} receive={ports.receive_port} "
          f"send={ports.send_port} mode=debug", file=stdout, flush=True)
    try:
        reader, send = await ports.accept()
        closed = asyncio.get_running_loop().create_task(_read(reader, replay))
        try:
            write_unless_closing(
                send, encode_checkpoint_record(reg.committer_id, plan.checkpoint.size))
            for chunk in plan.checkpoint.chunks():
                write_unless_closing(send, chunk)
                await send.drain()
            if testing_upgrade:
                write_unless_closing(
                    send, encode_control_record(reg.committer_id, UpgradeService()))
            for rec in replay_records(plan):
                write_unless_closing(send, rec.wire)
                replay.last_delivered = rec.seq_id
                result.records_replayed += 1
                if result.records_replayed % 256 == 0:
                    await send.drain()
            with contextlib.suppress(OSError):
                await send.drain()
            await _wait_done(closed, replay, idle_timeout)
        finally:
            closed.cancel()
            with contextlib.suppress(BaseException):
                await closed
            send.close()
    finally:
        ports.close()
    replay.finish()
    result.outputs = replay.outputs
    if recorded is None:
        result.status = "unchecked"
        result.detail = f"no replay digest was recorded for checkpoint {checkpoint}"
    else:
        result.recorded_outputs = len(recorded)
        if replay.divergence is not None:
            result.status = "diverged"
            result.first_divergence_seq = replay.divergence.seq_id
            result.detail = str(replay.divergence)
    return result


async def _wait_done(closed: asyncio.Task[None], replay: _Replay,
                     idle_timeout: float | None) -> None:
    if idle_timeout is None:
        await closed
        return
    while not closed.done():
        replay.activity.clear()
        waiter = asyncio.ensure_future(replay.activity.wait())
        done, _ = await asyncio.wait({closed, waiter}, timeout=idle_timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not done:
            return
    closed.result()


async def _read(reader: asyncio.StreamReader, replay: _Replay) -> None:
    decoder = MessageStreamDecoder()
    while data := await reader.read(1 << 16):
        replay.activity.set()
        try:
            decoder.receive_data(data)
            for ev in decoder.events():
                if type(ev) is OutgoingRpc:
                    replay.output(ev)
                elif type(ev) is RpcBatch:
                    for rpc in ev.rpcs:
                        replay.output(rpc)  # type: ignore[arg-type]
                elif type(ev) in (Checkpoint, CheckpointChunk, CheckpointEnd, InitialMessage):
                    pass  # persisted nowhere
        except RemoteProtocolError as err:
            raise CoordinatorError(f"binding sent malformed bytes: {err}") from None
