"""``KclCoordinator``: the connector coordinator with KCL multi-lang record processors
attached to its streams (a stream plays the part of a shard).

Each applied message of a stream with a processor becomes a record (sequence number = the
message id, partition key = its key, arrival = the applying input's logged time) kept in
the state until the processor checkpoints beyond it. With a staging root (``staging``)
the state keeps only references to the staged blocks that hold the records (each with
its messages' ids and keys), each held until a checkpoint covers it, and the driver
reads the records from the segments. The processors are side effects of
the primary (``ProcessorDriver``); their checkpoints come back as ``kcl_checkpoint``
Impulses, are recorded, and only then answered.

Run: ``ambrosia run kcl -i NAME --config FILE``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from ambrosia_py import impulse, rpc
from ambrosia_services.connectors.coordinator import (
    Applied,
    ConnectorCoordinator,
    CoordinatorConfig,
)
from ambrosia_services.staging import Ref

from .config import ProcessorConfig, processors_from_config
from .core import KclCore
from .driver import ProcessorDriver
from .protocol import Record

__all__ = ["KclCoordinator"]


class KclCoordinator(ConnectorCoordinator):
    """The connector coordinator, hosting a record processor per configured stream."""

    version = 0

    def __init__(self) -> None:
        super().__init__()
        self.kcl = KclCore()
        self._drivers: dict[str, ProcessorDriver] = {}  # the primary's; never state

    # ------------------------------------------------------------ hooks
    def coordinator_config(self) -> CoordinatorConfig:
        return CoordinatorConfig.from_mapping(
            {k: v for k, v in self.ctx.config.items() if k != "kcl"}, ("kcl",))

    def on_messages(self, stream_id: int, messages: Sequence[Applied]) -> None:
        super().on_messages(stream_id, messages)
        arrival_ms = self._now_ns() // 1_000_000
        name = self.core.streams[stream_id].name
        records = [Record(m.message_id, m.key, m.payload, arrival_ms) for m in messages]
        if self.kcl.retain(stream_id, name, records):
            self._wake_driver(name)

    def on_staged(self, stream_id: int, refs: Sequence[Ref]) -> None:
        name = self.core.streams[stream_id].name
        kept = self.kcl.retain_staged(stream_id, name, refs, self._now_ns() // 1_000_000)
        self.core.hold(kept)  # until a checkpoint covers them
        super().on_staged(stream_id, refs)
        if kept:
            self._wake_driver(name)

    def _release_dropped(self) -> None:
        dropped = self.kcl.take_dropped()
        if dropped:
            self.release(dropped)

    def on_end_of_stream(self, stream_id: int) -> None:
        super().on_end_of_stream(stream_id)
        if self.kcl.end_of_stream(stream_id):
            self._wake_driver(self.kcl.streams[stream_id].name)

    def on_become_primary(self) -> None:
        processors = processors_from_config(self.ctx.config)  # a bad one stops the instance
        super().on_become_primary()
        names = [p.stream for p in processors]
        if names != self.kcl.attached:
            self.impulse_self.kcl_configure(names)
        self.ctx.spawn(self._run_processors(processors))

    def checkpoint_state(self) -> Any:
        return {"coordinator": super().checkpoint_state(), "kcl": self.kcl.to_state()}

    def load_state(self, state: Any) -> None:
        super().load_state(state["coordinator"])
        self.kcl = KclCore.from_state(state["kcl"])

    def live_status(self) -> dict[str, Any]:
        live = super().live_status()
        live["processors"] = {name: d.report() for name, d in sorted(self._drivers.items())}
        return live

    # ------------------------------------------------------------ inputs
    @impulse
    def kcl_configure(self, names: list[str]) -> None:
        self.kcl.configure(names)
        self._release_dropped()
        self.ctx.log.info("kcl: record processors on %s", ", ".join(names) or "no stream")
        for name in names:
            self._wake_driver(name)

    @impulse
    def kcl_checkpoint(self, token: int, stream_id: int, sequence: int, at_end: bool) -> None:
        """A processor's checkpoint: recorded (or refused), then answered by the driver."""
        error = self.kcl.checkpoint(stream_id, sequence, at_end)
        self._release_dropped()
        rec = self.kcl.streams.get(stream_id)
        if rec is not None and self._is_live():
            driver = self._drivers.get(rec.name)
            if driver is not None:
                driver.checkpointed(token, error)

    @rpc
    async def kcl_status(self) -> dict[str, Any]:
        """Per stream with a processor: its checkpoint, the records kept after it,
        whether it ended and finished, checkpoints recorded and refused (state only)."""
        return self.kcl.status()

    # ------------------------------------------------------------ the primary's side
    def _wake_driver(self, name: str) -> None:
        driver = self._drivers.get(name)
        if driver is not None and self._is_live():
            driver.wake()

    async def _run_processors(self, processors: list[ProcessorConfig]) -> None:
        me = self.impulse_self
        # A random start, so a token of an earlier life is never taken for one of ours.
        first = int.from_bytes(os.urandom(6))
        ctx = self.ctx
        staging = self.coordinator_config().staging or ""
        self._drivers = {p.stream: ProcessorDriver(p, lambda: self.kcl, me.kcl_checkpoint,
                                                   ctx.log, first + (i << 32),
                                                   lambda: ctx.stop_reason, staging)
                         for i, p in enumerate(processors)}
        tasks = [asyncio.ensure_future(d.run()) for d in self._drivers.values()]
        if not tasks:
            return  # no [kcl] table: a coordinator with nothing to drive
        try:
            # Not gather: a stop cancels this task, and each driver must be cancelled
            # exactly once, so that its child's end (shutdownRequested or leaseLost, as
            # ctx.stop_reason says) runs undisturbed.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()  # a driver's bug ends the instance, as any side effect's would
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks)
