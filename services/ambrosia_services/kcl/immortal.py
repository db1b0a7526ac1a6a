"""``KclCoordinator``: the connector coordinator with KCL multi-lang record processors
attached to its streams (a stream plays the part of a shard).

Each applied message of a stream with a processor becomes a record (sequence number = the
message id, partition key = its key, arrival = the applying input's logged time) kept in
the state until the processor checkpoints beyond it. With a staging root (``staging``)
the state keeps only references to the staged blocks that hold the records (each with
its messages' ids and keys), each held until a checkpoint covers it, and the driver
reads the records from the segments. The processors are side effects of
the primary (``ProcessorDriver``), one for each stream the state has a processor on
(``ctx.run_effects``); their checkpoints come back as ``kcl_checkpoint`` Impulses, are
recorded, and only then answered.

Run: ``ambrosia run kcl -i NAME --config FILE``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ambrosia_py import impulse, rpc
from ambrosia_py.effects import Effects
from ambrosia_services.connectors.coordinator import (
    Applied,
    ConnectorCoordinator,
    CoordinatorConfig,
)
from ambrosia_services.staging import Ref

from .config import ProcessorConfig, processors_from_config
from .core import KclCore
from .driver import ProcessorDriver
from .protocol import KclRecord

__all__ = ["KclCoordinator"]


class KclCoordinator(ConnectorCoordinator):
    """The connector coordinator, hosting a record processor per configured stream."""

    version = 0

    def __init__(self) -> None:
        super().__init__()
        self.kcl = KclCore()
        self._processors: Effects[str, ProcessorConfig] | None = None  # the primary's

    # ------------------------------------------------------------ hooks
    def coordinator_config(self) -> CoordinatorConfig:
        return CoordinatorConfig.from_mapping(
            {k: v for k, v in self.ctx.config.items() if k != "kcl"}, ("kcl",))

    def on_messages(self, stream_id: int, messages: Sequence[Applied]) -> None:
        super().on_messages(stream_id, messages)
        arrival_ms = self._now_ns() // 1_000_000
        name = self.core.streams[stream_id].name
        records = [KclRecord(m.message_id, m.key, m.payload, arrival_ms) for m in messages]
        self.kcl.retain(stream_id, name, records)

    def on_staged(self, stream_id: int, refs: Sequence[Ref]) -> None:
        name = self.core.streams[stream_id].name
        kept = self.kcl.retain_staged(stream_id, name, refs, self._now_ns() // 1_000_000)
        self.core.hold(kept)  # until a checkpoint covers them
        super().on_staged(stream_id, refs)

    def _release_dropped(self) -> None:
        dropped = self.kcl.take_dropped()
        if dropped:
            self.release(dropped)

    def on_end_of_stream(self, stream_id: int) -> None:
        super().on_end_of_stream(stream_id)
        self.kcl.end_of_stream(stream_id)

    def on_become_primary(self) -> None:
        processors = processors_from_config(self.ctx.config)  # a bad one stops the instance
        super().on_become_primary()
        names = [p.stream for p in processors]
        if names != self.kcl.attached:
            self.impulse_self.kcl_configure(names)
        if processors:
            self._processors = self._processor_effects(processors)
            self.ctx.run_effects(self._processors)

    def checkpoint_state(self) -> Any:
        return {"coordinator": super().checkpoint_state(), "kcl": self.kcl.to_state()}

    def load_state(self, state: Any) -> None:
        super().load_state(state["coordinator"])
        self.kcl = KclCore.from_state(state["kcl"])

    def live_status(self) -> dict[str, Any]:
        live = super().live_status()
        running = {} if self._processors is None else self._processors.effects
        live["processors"] = {name: d.report() for name, d in sorted(running.items())
                              if isinstance(d, ProcessorDriver)}
        return live

    # ------------------------------------------------------------ inputs
    @impulse
    def kcl_configure(self, names: list[str]) -> None:
        self.kcl.configure(names)
        self._release_dropped()
        self.ctx.log.info("kcl: record processors on %s", ", ".join(names) or "no stream")

    @impulse
    def kcl_checkpoint(self, token: int, stream_id: int, sequence: int, at_end: bool) -> None:
        """A processor's checkpoint: recorded (or refused), then answered by the driver."""
        error = self.kcl.checkpoint(stream_id, sequence, at_end)
        self._release_dropped()
        rec = self.kcl.streams.get(stream_id)
        if rec is not None and self._processors is not None and self._is_live():
            driver = self._processors.effects.get(rec.name)
            if isinstance(driver, ProcessorDriver):
                driver.checkpointed(token, error)

    @rpc
    async def kcl_status(self) -> dict[str, Any]:
        """Per stream with a processor: its checkpoint, the records kept after it,
        whether it ended and finished, checkpoints recorded and refused (state only)."""
        return self.kcl.status()

    # ------------------------------------------------------------ the primary's side
    def _processor_effects(self, processors: list[ProcessorConfig]
                           ) -> Effects[str, ProcessorConfig]:
        """A driver for each stream the state has a processor on (``kcl_configure``)."""
        by_name = {p.stream: p for p in processors}
        order = sorted(by_name)
        me, ctx = self.impulse_self, self.ctx
        # A random start, so a token of an earlier life is never taken for one of ours.
        first = int.from_bytes(os.urandom(6))
        staging = self.coordinator_config().staging or ""

        def wanted() -> dict[str, ProcessorConfig]:
            return {name: by_name[name] for name in self.kcl.attached if name in by_name}

        def start(name: str, cfg: ProcessorConfig) -> ProcessorDriver:
            return ProcessorDriver(cfg, lambda: self.kcl, me.kcl_checkpoint, ctx.log,
                                   first + (order.index(name) << 32),
                                   lambda: ctx.stop_reason, staging)

        return Effects(wanted, start)
