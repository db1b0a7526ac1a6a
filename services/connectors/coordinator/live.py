"""The primary's outside world: the source listener, one link per sink, the tick timer
and the status reports, started together by ``on_become_primary`` and cancelled with the
instance. Nothing here changes the state; every outcome is an Impulse."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from typing import TYPE_CHECKING, Any

from .config import CoordinatorConfig
from .core import CoordinatorCore
from .sinks import SinkLink
from .sources import SourceListener

if TYPE_CHECKING:
    from .immortal import ConnectorCoordinator

__all__ = ["Live"]


class Live:
    """Everything the primary does with sockets and clocks, for one coordinator."""

    def __init__(self, owner: ConnectorCoordinator, cfg: CoordinatorConfig) -> None:
        self.owner = owner
        self.cfg = cfg
        self.log = owner.ctx.log
        me = owner.impulse_self
        self.sources = SourceListener(self._core, cfg, me.receive, me.end_of_stream,
                                      self.log)
        self.sinks = [SinkLink(name, self._core, cfg, owner.ctx.instance_name,
                               me.sink_uncommitted, me.sink_voted, self.log)
                      for name in sorted(cfg.sinks)]
        self._last_tick = 0.0

    def _core(self) -> CoordinatorCore:
        return self.owner.core  # read anew: an upgrade or a load may replace it

    # ------------------------------------------------------------ from handlers
    def wake(self) -> None:
        for link in self.sinks:
            link.wake()

    def applied(self, token: int) -> None:
        self.sources.applied(token)

    # ------------------------------------------------------------ the tasks
    async def run(self) -> None:
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self.sources.start()
            tasks = [asyncio.ensure_future(t) for t in (
                self.sources.run_flusher(), self._ticker(), self._reporter(),
                *(link.run() for link in self.sinks))]
            await asyncio.gather(*tasks)
        finally:
            self.sources.close(self.cfg.advertise)
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            if self.cfg.status_file:  # the last status: what `ambrosia status` shows now
                self._write_status(self.report())

    async def _ticker(self) -> None:
        """A ``tick`` Impulse when some sink's uncut output is old enough to cut."""
        period = self.cfg.interval_seconds / 2
        while True:
            await asyncio.sleep(period)
            core = self._core()
            age_limit = core.settings["interval_seconds"] * 1e9
            now = time.time_ns()
            if any(rec.uncut and not rec.txn_id and rec.uncut_since is not None
                   and now - rec.uncut_since >= age_limit for rec in core.sinks.values()):
                self.owner.impulse_self.tick()

    async def _reporter(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.status_seconds)
            report = self.report()
            sinks = report["sinks"]
            self.log.info(
                "status: %d sources, %d received, %d acked, lag %d; %s",
                report["connections"], report["received"], report["acked"], report["lag"],
                ", ".join(f"{n} committed {s['committed']} pending {s['pending_bytes']}"
                          for n, s in sinks.items()) or "no sinks")
            if self.cfg.status_file:
                self._write_status(report)

    def report(self) -> dict[str, Any]:
        """The state's status with the live counters added."""
        report = self.owner.state_status()
        applied = sum(s["applied"] + s["dropped"] for s in report["streams"].values())
        report.update(
            port=self.sources.port, connections=self.sources.connections,
            received=self.sources.received, acked=self.sources.acked,
            lag=max(self.sources.received - applied, 0),
            linked={link.name: link.connected for link in self.sinks},
            aborts_in_a_row={link.name: link.aborts_in_a_row for link in self.sinks})
        report.update(self.owner.live_status())
        return report

    def _write_status(self, report: dict[str, Any]) -> None:
        path = self.cfg.status_file
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(report, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except OSError as e:
            self.log.warning("status file %s not written: %s", path, e.strerror or e)
