"""``SparkCoordinator``: a connector coordinator that is also the job protocol's initiator.

A subclass decides jobs in its handlers (``submit_job``), and hears of each job once, in a
handler, when its whole result has arrived (``on_job_result``) or when its last attempt
failed (``on_job_failed``). No handler waits for a job: a job is a row of the logged job
table (``jobtable.JobTable``), advanced by Impulses that the primary's ``JobsLive`` sends
(``job_batch``, ``job_failed``, ``job_lost``, ``job_started``).

Run: ``ambrosia run spark -i NAME --config FILE`` with the
connector coordinator's keys plus ``runners``, ``out``, ``max_attempts`` (see ``config``).
"""

from __future__ import annotations

import json
from typing import Any

from ambrosia_core.metrics import DURATION_BUCKETS, Families, Histogram
from ambrosia_py import impulse, rpc
from ambrosia_services.connectors.coordinator import (
    ConnectorCoordinator,
    CoordinatorConfig,
    CoordinatorConfigError,
)

from .config import PipelineConfig
from .jobtable import JobPhase, JobTable
from .live import JobsLive

__all__ = ["SparkCoordinator"]


class SparkCoordinator(ConnectorCoordinator):
    """A connector coordinator that runs Spark jobs on job runners, each exactly once."""

    needs_runners = False  # a subclass that always submits jobs says so: checked at start

    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self._jobs_live: JobsLive | None = None  # the primary's links; never state
        self._pipeline_cfg: PipelineConfig | None = None
        # Job durations by outcome, for the metrics; never state.
        self._job_seconds: dict[str, Histogram] = {}

    # ------------------------------------------------------------ the API for subclasses
    def submit_job(self, name: str, args: dict[str, Any]) -> str:
        """Decide a job (only in a handler): ``name`` is a runner's ``@spark_job``, ``args``
        plain msgpack data. Returns its key, derived from the state (``<instance>-<n>``)."""
        if not self.jobs.runners:
            raise RuntimeError("submit_job needs at least one runner in the configuration")
        key = self.jobs.submit(name, args, self._now_ns())
        return key

    def cancel_job(self, key: str, reason: str = "cancelled") -> bool:
        """Cancel a job not yet ended (only in a handler); the runner is asked to stop
        it (``interruptTag``) and nothing of it is committed or reported after this.
        Returns whether the job was running."""
        cancelled = self.jobs.cancel(key, reason)
        return cancelled

    def on_job_result(self, key: str, rows: list[Any]) -> None:
        """Called once per job, in a handler, with every row of its committed output."""

    def on_job_failed(self, key: str, reason: str) -> None:
        """Called once per job, in a handler, when its ``max_attempts``-th attempt failed."""
        self.ctx.log.warning("job %s failed: %s", key, reason)

    def wants_job_tick(self, now_ns: int) -> bool:
        """Asked (outside handlers, on the primary) whether a ``job_tick`` is due for the
        subclass's own time-driven decisions (job timeouts are asked apart)."""
        return False

    def on_job_tick(self) -> None:
        """The ``job_tick`` handler's body: time-driven decisions."""

    # ------------------------------------------------------------ lifecycle
    def coordinator_config(self) -> CoordinatorConfig:
        cfg = self._pipeline_cfg = PipelineConfig.from_mapping(self.ctx.config,
                                                               stages=self.uses_staging)
        if self.needs_runners and not cfg.runners:
            raise CoordinatorConfigError(f"runners: {type(self).__name__} needs at least one "
                                         "job runner (\"name@host:port\")")
        return cfg.coordinator

    def on_become_primary(self) -> None:
        super().on_become_primary()
        cfg = self._pipeline_cfg
        assert cfg is not None
        wanted = cfg.decision_part()
        if wanted != self.jobs.settings:
            self.impulse_self.configure_jobs(wanted)
        if cfg.runners:
            self._jobs_live = JobsLive(self, cfg)
            self.ctx.run_effects(self._jobs_live)

    def checkpoint_state(self) -> Any:
        return {"coordinator": super().checkpoint_state(), "jobs": self.jobs.to_state()}

    def load_state(self, state: Any) -> None:
        super().load_state(state["coordinator"])
        self.jobs = JobTable.from_state(state["jobs"])

    def state_status(self) -> dict[str, Any]:
        status = super().state_status()
        status["jobs"] = self.jobs.status()
        return status

    def live_status(self) -> dict[str, Any]:
        live = self._jobs_live
        return {} if live is None else {"job_links": live.report()}

    def live_metrics(self, f: Families) -> None:
        """Jobs by state (the job table's, since the instance began), attempts, and how
        long the jobs that ended while this process was primary took."""
        table = self.jobs
        name = {"instance_name": self.ctx.instance_name}
        phases = [e.phase for e in list(table.jobs.values())]
        counts = dict(table.counts)
        for state, n in (("waiting", phases.count(JobPhase.DECIDED)),
                         ("running", phases.count(JobPhase.RUNNING)),
                         ("done", counts["done"]), ("failed", counts["failed"]),
                         ("cancelled", counts["cancelled"])):
            f.gauge("ambrosia_pipeline_jobs", "Jobs by state: waiting for a runner, running, "
                    "and ended (done, failed, cancelled) since the instance began", n,
                    state=state, **name)
        f.counter("ambrosia_pipeline_jobs_decided", "Jobs decided, since the instance began",
                  table.jobs_decided, **name)
        f.counter("ambrosia_pipeline_job_attempts", "Attempts decided (first attempts, "
                  "retries, new attempts after a loss)", counts["attempts"], **name)
        for outcome, hist in sorted(dict(self._job_seconds).items()):
            f.histogram("ambrosia_pipeline_job_duration_seconds", "From the decision of a "
                        "job's last attempt to its whole result or its failure (logged "
                        "times), for jobs that ended while this process was primary", hist,
                        outcome=outcome, **name)

    def _job_ended(self, outcome: str, since_ns: int) -> None:
        """A job ended in a handler: its duration, when this process is primary (never
        while replaying) and its attempt's decision time is known."""
        if since_ns and self._is_live():
            hist = self._job_seconds.get(outcome)
            if hist is None:
                hist = self._job_seconds[outcome] = Histogram(DURATION_BUCKETS)
            hist.observe(max(self._now_ns() - since_ns, 0) / 1e9)

    def _since(self, key: str) -> int:
        entry = self.jobs.jobs.get(key)
        return 0 if entry is None else entry.since_ns

    # ------------------------------------------------------------ inputs
    @impulse
    def configure_jobs(self, settings: dict[str, Any]) -> None:
        self.jobs.configure(self.ctx.instance_name, settings)
        self.ctx.log.info("jobs configured: %d runner(s), %d attempts at most",
                          len(self.jobs.runners), self.jobs.max_attempts)

    @impulse
    def job_started(self, key: str, local_id: int) -> None:
        self.jobs.started(key, local_id)

    @impulse
    def job_batch(self, key: str, local_id: int, number: int, rows: bytes, last: bool) -> None:
        since = self._since(key)
        result = self.jobs.batch(key, local_id, number, rows, last)
        if result is None:
            return
        try:
            parsed = [json.loads(line) for line in result.splitlines()]
        except ValueError as err:  # a runner's fault; the same bytes fail the same on replay
            self._job_ended("failed", since)
            self.ctx.log.warning("job %s: its result is not JSON lines (%s)", key, err)
            self.jobs.unreadable(key, f"its result is not JSON lines: {err}")
            self.on_job_failed(key, f"its result is not JSON lines: {err}")
        else:
            self._job_ended("done", since)
            self.on_job_result(key, parsed)

    @impulse
    def job_failed(self, key: str, local_id: int, reason: str) -> None:
        since = self._since(key)
        if self.jobs.failed(key, local_id, reason, self._now_ns()):
            self._job_ended("failed", since)
            self.on_job_failed(key, reason)

    @impulse
    def job_lost(self, key: str, local_id: int, same_attempt: bool, why: str) -> None:
        since = self._since(key)
        if self.jobs.lost(key, local_id, same_attempt, why, self._now_ns()):
            self._job_ended("failed", since)
            self.on_job_failed(key, self.jobs.ended[-1].reason)

    @rpc
    async def cancel(self, key: str, reason: str = "cancelled on request") -> bool:
        """Cancel job ``key`` (see ``cancel_job``); False if it had ended or is unknown."""
        return self.cancel_job(key, reason)

    @impulse
    def job_tick(self) -> None:
        if self._jobs_live is not None and self._is_live():
            self._jobs_live.tick_sent = False
        now = self._now_ns()
        for key in self.jobs.timed_out(now):  # by logged time: a replay decides the same
            self.ctx.log.warning("job %s: %s", key, f"attempt {self.jobs.jobs[key].attempt} "
                                 "timed out; the next goes to the next runner")
            since = self._since(key)
            if self.jobs.expire(key, now):
                self._job_ended("failed", since)
                self.on_job_failed(key, self.jobs.ended[-1].reason)
        self.on_job_tick()
