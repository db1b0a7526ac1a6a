"""The primary's outside world: the source listener, one link per sink, the tick timer
and the status reports, started together by ``on_become_primary`` (``ctx.run_effects``:
woken after every run of inputs applied) and cancelled with the instance. Nothing here
changes the state; every outcome is an Impulse. Each long-lived task is an effect
(``ambrosia_py.effects``: the ticker, the reporter, the listener's flusher, the staged
segments' collector and the sinks' links, ``Live.chores``), with its retry declared.

The links follow the state: one per sink the state has active (``wanted_sinks``), started
when a ``configure`` Impulse adds a sink and stopped when one removes it.

Each status write also carries a short ``history`` (one sample of the counters per write,
for the status page's chart) and the instance logger's recent warnings and errors
(``errors``): both live in this life's memory only, never in the state."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ambrosia_core.durable import replace_durably
from ambrosia_core.metrics import Families, MetricsServer
from ambrosia_core.retry import Attempts, Retry
from ambrosia_py.effects import Chore, Effect, Effects, chores, every
from ambrosia_services.staging import SegmentWriter, segment_names

from .commits import CommitClock
from .config import CoordinatorConfig
from .core import ConnectorCore
from .metrics import ConnectorMetrics
from .sinks import SinkLink
from .sources import SourceListener

if TYPE_CHECKING:
    from ambrosia_py import ImmortalContext

__all__ = ["Live", "Owner", "RecentErrors"]

#: Samples kept in the status file's ``history``: at the default 5 s between writes, the
#: last 20 minutes (a page that stays open keeps more itself).
HISTORY_KEEP = 240
#: Warning and error records kept in the status file's ``errors``.
ERRORS_KEEP = 40
#: A longer message is cut: the status file is rewritten every few seconds.
_MESSAGE_CHARS = 1000
#: The collector's passes: a staging root that cannot be listed or cleaned (a full or
#: failing disk) is tried again from 1 s doubling to a minute, said once a streak, rather
#: than stopping the primary; the sources' own staging failures are what the status shows.
COLLECT_RETRY = Retry(floor=1.0, cap=60.0, on=(OSError,))


class RecentErrors(logging.Handler):
    """The last WARNING and ERROR records of a logger, for the status file: the first
    thing an operator looks for. The handler's level keeps lesser records from reaching
    ``emit``, so ordinary logging pays nothing for it."""

    def __init__(self, keep: int = ERRORS_KEEP) -> None:
        super().__init__(logging.WARNING)
        self._records: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: its format
            message = str(record.msg)
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            message = f"{message} ({type(exc).__name__}: {exc})"
        self._records.append({"time": round(record.created, 3), "level": record.levelname,
                              "logger": record.name, "message": message[:_MESSAGE_CHARS]})

    def recent(self) -> list[dict[str, Any]]:
        """The records kept, oldest first (a copy: ``emit`` may run on another thread)."""
        self.acquire()
        try:
            return list(self._records)
        finally:
            self.release()


class Owner(Protocol):
    """What the primary's side reads of its immortal (``ConnectorCoordinator``)."""

    core: ConnectorCore  # read anew each time: an upgrade or a load may replace it

    @property
    def ctx(self) -> ImmortalContext: ...

    @property
    def impulse_self(self) -> Any: ...  # the Impulses it sends: receive, sink_voted, tick, ...

    def state_status(self) -> dict[str, Any]: ...

    def live_status(self) -> dict[str, Any]: ...

    def live_metrics(self, f: Families) -> None: ...


class Live:
    """Everything the primary does with sockets and clocks, for one coordinator."""

    def __init__(self, owner: Owner, cfg: CoordinatorConfig) -> None:
        self.owner = owner
        self.cfg = cfg
        self.log = owner.ctx.log
        me = owner.impulse_self
        # The process's metrics, when it serves them (``ambrosia run --metrics``): the
        # runtime ``ambrosia run`` drives carries its server; other runtimes have none.
        self.metrics_server: MetricsServer | None = getattr(owner.ctx.runtime, "metrics",
                                                            None)
        self.metrics = (ConnectorMetrics(self._core, owner.ctx.instance_name)
                        if self.metrics_server else None)
        receive, receive_staged = me.receive, me.receive_staged
        if self.metrics is not None:
            receive = self.metrics.counting(receive)
            receive_staged = self.metrics.counting_staged(receive_staged)
        # With staging, this life's segments: named after the instance and a random life
        # id, never appended to by another life. Only the instance's own segments are
        # ever deleted here: a root may be shared by several instances.
        self.segment_prefix = f"{owner.ctx.instance_name}."
        self.writer = (SegmentWriter(cfg.staging, self.segment_prefix + os.urandom(6).hex(),
                                     cfg.segment_bytes)
                       if cfg.staging else None)
        self.sources = SourceListener(self._core, cfg, receive, me.end_of_stream,
                                      self.log, receive_staged, self.writer)
        self.deleted_segments = 0
        self.commits = CommitClock()
        if self.metrics is not None:
            self.commits.listeners.append(self.metrics.committed)
        self.history: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=HISTORY_KEEP)
        self._sampled_commits = 0  # the clock's count at the last sample
        # This run (this process's primary life): when it began, and what the state had
        # applied then. The listener's counters are this run's; the state's are of every
        # run, so the lag compares the listener with what this run applied.
        self.run_started = time.time()
        self._applied_before = self._applied()
        self.errors = RecentErrors()
        self.sinks: Effects[str, str] = Effects(
            self.wanted_sinks,
            lambda name, _address: SinkLink(name, self._core, cfg, owner.ctx.instance_name,
                                            me.sink_uncommitted, me.sink_voted, self.log,
                                            self._decided))

    def wanted_sinks(self) -> dict[str, str]:
        """A link for every sink the state has active and the configuration names, with
        its address (a new address is a new link)."""
        return {name: self.cfg.sinks[name] for name, rec in sorted(self._core().sinks.items())
                if rec.active and name in self.cfg.sinks}

    def _core(self) -> ConnectorCore:
        return self.owner.core  # read anew: an upgrade or a load may replace it

    def _applied(self) -> int:
        """MESSAGEs the state has applied or dropped as duplicates, in every run."""
        return sum(s.applied + s.dropped for s in self._core().streams.values())

    # ------------------------------------------------------------ from handlers
    def wake(self) -> None:
        """Inputs were applied: the sinks' links look at the state again, and the
        listener gives back the credits of what was applied."""
        now = time.time()
        for name, rec in self._core().sinks.items():
            if rec.active:
                self.commits.observe(name, rec, now)
        self.sinks.wake()
        self.sources.release_credits()

    def _decided(self, name: str, txn_id: str, commit: bool) -> None:
        self.commits.decided(name, txn_id, commit, time.time())

    def applied(self, token: int) -> None:
        self.sources.applied(token)

    # ------------------------------------------------------------ the tasks
    def chores(self) -> dict[str, Effect]:
        """The primary's long-lived tasks, each an effect with its retry declared: the
        ticker, the reporter and the flusher have none (a failure of theirs is a bug, and
        ends the instance), the sinks' links declare theirs each, the collector
        ``COLLECT_RETRY``."""
        named: dict[str, Effect] = {
            "flusher": Chore(self.sources.run_flusher),
            "ticker": every(self.cfg.interval_seconds / 2, self._tick),
            "reporter": every(self.cfg.status_seconds, self._report),
            "sinks": self.sinks,
        }
        if self.writer is not None:
            named["collector"] = Chore(self._collector, retry=COLLECT_RETRY,
                                       delay=self._collect_failed)
        return named

    async def run(self) -> None:
        # The instance's own logger (ctx.log is a replay-aware adapter around it).
        logger = self.log.logger
        logger.addHandler(self.errors)
        if self.metrics_server is not None:
            self.metrics_server.add(self.export)
        try:
            await self.sources.start()
            await chores(self.chores()).run()
        finally:
            self.sources.close(self.cfg.advertise)
            if self.writer is not None:
                self.writer.close()
            try:
                if self.cfg.status_file:  # the last status: what `ambrosia status` shows
                    # Marked as the last: a status without the mark outlived its process
                    # (kill -9, a crash), which `ambrosia status` tells from a stop.
                    reason = self.owner.ctx.stop_reason
                    report = self.report()
                    report["stopped"] = {"time": round(time.time(), 3),
                                         "reason": reason.value if reason else None}
                    self._write_status(self._with_history(report))
            finally:
                logger.removeHandler(self.errors)
                if self.metrics_server is not None:
                    self.metrics_server.remove(self.export)

    def export(self, f: Families) -> None:
        """The metrics source of this primary (on the exposition server's thread): the
        connector coordinator's, then the immortal's own (``live_metrics``)."""
        if self.metrics is not None:
            self.metrics.read(f, self.sources, self.sinks.effects)
        self.owner.live_metrics(f)

    def _tick(self) -> None:
        """A ``tick`` Impulse when some sink's uncut output is old enough to cut."""
        if self._core().wants_tick(time.time_ns()):
            self.owner.impulse_self.tick()

    GC_SECONDS = 1.0

    async def _collector(self) -> None:
        """Delete staged segments that nothing needs: no block of them is held by the
        state, none is named by an Impulse not yet applied, and this life is not writing
        them. The first pass, at the start of a primary's life, removes what an earlier
        life staged and never referenced (it crashed between the write and the Impulse)."""
        while True:
            await self.collect()
            await asyncio.sleep(self.GC_SECONDS)

    def _collect_failed(self, error: Exception, attempts: Attempts) -> float:
        """A pass that failed: said at the first of a streak, then the 10th, 100th, ..."""
        wait = attempts.next_wait()
        if attempts.worth_saying:
            again = "" if attempts.failures == 1 else f" ({attempts.failures} in a row)"
            why = error.strerror if isinstance(error, OSError) and error.strerror else error
            self.log.warning("staged segments not collected: %s%s; trying again in %.0f s",
                             why, again, wait)
        return wait

    async def collect(self) -> None:
        # The order matters: the names, then what is busy (a block written after this
        # is in a segment created after the listing, or in the current one), then what
        # the state holds (read on the loop, after an Impulse applied stops being busy).
        names = await asyncio.to_thread(segment_names, self.cfg.staging, self.segment_prefix)
        busy = await asyncio.to_thread(self.sources.busy_segments)
        held = set(self._core().segments)
        doomed = [n for n in names if n not in busy and n not in held]
        if doomed:
            await asyncio.to_thread(self._delete, doomed)

    def _delete(self, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.cfg.staging, name))
                self.deleted_segments += 1

    def _report(self) -> None:
        report = self.report()
        sinks = report["sinks"]
        self.log.info(
            "status: %d sources, %d received, %d acked, lag %d; %s",
            report["connections"], report["received"], report["acked"], report["lag"],
            ", ".join(f"{n} committed {s['committed']} pending {s['pending_bytes']}"
                      for n, s in sinks.items()) or "no sinks")
        if self.cfg.status_file:
            self._write_status(self._with_history(report))

    def _with_history(self, report: dict[str, Any]) -> dict[str, Any]:
        """``report`` with a new sample of its counters added to the history, and the
        history: received, acked, applied (messages, and lines where streams count
        them), committed bytes per sink, and the commits measured since the last sample
        with their mean and slowest latency."""
        count = self.commits.commits
        new = count - self._sampled_commits
        self._sampled_commits = count
        latencies = [c.latency for c in list(self.commits.recent)[-new:]] if new > 0 else []
        streams = report["streams"].values()
        self.history.append({
            "time": round(time.time(), 3), "received": report["received"],
            "acked": report["acked"], "applied": sum(s["applied"] for s in streams),
            "lines": sum(s.get("lines", 0) for s in streams),
            "committed": {name: s["committed"] for name, s in report["sinks"].items()},
            "commits": new,
            "latency_ms": (round(sum(latencies) / len(latencies) * 1e3, 1)
                           if latencies else None),
            "latency_max_ms": round(max(latencies) * 1e3, 1) if latencies else None})
        report["history"] = list(self.history)
        return report

    def report(self) -> dict[str, Any]:
        """The state's status with the live counters added."""
        report = self.owner.state_status()
        applied = sum(s["applied"] + s["dropped"] for s in report["streams"].values())
        this_run = applied - self._applied_before
        report.update(
            pid=os.getpid(), run_started=round(self.run_started, 3),
            port=self.sources.port, connections=self.sources.connections,
            received=self.sources.received, acked=self.sources.acked,
            lag=max(self.sources.received - self.sources.early_drops - this_run, 0),
            linked={name: link.connected for name, link in self._links()},
            aborts_in_a_row={name: link.aborts_in_a_row for name, link in self._links()},
            commit_latency=self.commits.summary(), errors=self.errors.recent())
        if self.writer is not None:
            report["staged"].update(
                root=self.cfg.staging, backlog_limit=self.cfg.backlog_bytes,
                held_credits=self.sources.held_credits,
                deleted_segments=self.deleted_segments,
                failures=self.sources.staging_failures,
                resends_dropped=self.sources.early_drops)
        report.update(self.owner.live_status())
        return report

    def _links(self) -> list[tuple[str, SinkLink]]:
        return [(name, link) for name, link in sorted(self.sinks.effects.items())
                if isinstance(link, SinkLink)]

    def _write_status(self, report: dict[str, Any]) -> None:
        path = self.cfg.status_file
        try:
            replace_durably(Path(path), json.dumps(report, indent=1, sort_keys=True).encode())
        except OSError as e:
            self.log.warning("status file %s not written: %s", path, e.strerror or e)
