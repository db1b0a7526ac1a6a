"""The primary's side of the job table: links to the runners, launches, cancels and
reconciliation. Nothing here changes the state; everything it learns is an Impulse.

It acts only on what the handlers already decided (and the log made durable): each pass
of ``sync`` launches the current start of every job the runner has not been given in this
life, and cancels the starts the table lists as cancelled. A protocol job id is
``JobId(coordinator member, local id)`` with the local id from the state, so a new
primary rebuilds the initiator's table from the state, and a runner's ``check`` after a
failover finds the jobs it still holds.

Reconciliation (``attempts.reconcile``, in the issue's order), for every start a runner
does not hold (``Held.lost``: the runner restarted, or a new primary finds a start its
runner never got): committed output or finished staging -> the same attempt is started
again (the runner streams or commits it without running it); otherwise (partial staging,
or none yet) the same attempt is started again too, and the runner asks Spark Connect
(``GetStatus``, in the attempt's session) what became of it: a write that still runs is
re-attached and committed, one never launched (the session unknown) is launched, and one
that ended without finished output makes the runner refuse the start
(``ATTEMPT_REUSED``), which decides a new attempt. The coordinator loads no pyspark, so
this question is the runner's; answering it there keeps a new attempt from running beside
an orphaned write that Spark still runs.
Both are decided by the ``job_lost`` handler. A start a runner still holds is waited for:
its committed result streams again from batch 0, and the handler drops what it has.

Its long-lived tasks are effects (``ambrosia_py.effects``), run by one driver while primary
(``JobsLive.chores``): the runners' events, the sync, the tick timer (none retried: a
failure of theirs ends the instance), and one reconciliation per lost start, keyed by its
local id (started once; ``RECONCILE_RETRY`` when its output cannot be read).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from ambrosia_core.retry import Attempts, Retry
from ambrosia_py.effects import Chore, Effect, Effects, chores, every, woken
from ambrosia_services.jobs import (
    Cancel,
    Deliver,
    IllegalJobTransitionError,
    InitiatorJobs,
    InitiatorState,
    JobCancelled,
    JobDone,
    JobId,
    JobRecord,
)
from ambrosia_services.jobs.attempts import (
    Attempt,
    Reconciled,
    member_id,
    reconcile,
)
from ambrosia_services.jobs.link import Connected, Held, JobLinks, RunnerAddress

from .config import PipelineConfig, runner_address
from .jobtable import JobTable
from .linkplan import CancelMeaning, LinkPlan, lost_decision

if TYPE_CHECKING:
    from ambrosia_py import ImmortalContext

__all__ = ["JobsLive", "Owner", "coordinator_member"]


class Owner(Protocol):
    """What the job links read of their immortal (``SparkCoordinator``)."""

    jobs: JobTable  # read anew each time: a load may replace it

    @property
    def ctx(self) -> ImmortalContext: ...

    @property
    def impulse_self(self) -> Any: ...  # the Impulses they send: job_batch, job_lost, job_tick, ...

    def wants_job_tick(self, now_ns: int) -> bool: ...

TICK_PERIOD = 0.1  # how often the app's tick condition is looked at
#: A lost start's reconciliation reads its output directory: one that cannot be read (a
#: network file system away) is read again from 1 s doubling to 30 s, said once a streak.
RECONCILE_RETRY = Retry(floor=1.0, cap=30.0, on=(OSError,))


def coordinator_member(instance: str) -> uuid.UUID:
    """The coordinator's member id in the job protocol: the same in every life."""
    return member_id(f"coordinator/{instance}")


class JobsLive:
    """The links to the runners of one Spark coordinator, on its primary."""

    def __init__(self, owner: Owner, cfg: PipelineConfig) -> None:
        self.owner = owner
        self.cfg = cfg
        self.log = owner.ctx.log
        self.member = coordinator_member(owner.ctx.instance_name)
        self.addresses: dict[str, RunnerAddress] = {r: runner_address(r) for r in cfg.runners}
        table = self._table()
        # What the links decide (sans-IO): what to launch, cancel and reconcile.
        self.plan = LinkPlan(self.member, {r: a.member for r, a in self.addresses.items()},
                             table)
        records = [JobRecord(JobId(self.member, local), [runner])
                   for local, runner in self.plan.records.items()]
        self.links = JobLinks(InitiatorJobs(self.member, next_local_id=table.next_local,
                                            records=records),
                              self.addresses.values(), tls=cfg.coordinator.load_tls())
        # The starts lost by their runners, by local id, each reconciled once (an effect).
        self.reconciling = self.plan.reconciling
        self._reconciles: Effects[int, str] = Effects(
            lambda: self.reconciling,
            lambda local, key: Chore(lambda: self._reconcile(key, local),
                                     retry=RECONCILE_RETRY, delay=self._reconcile_failed))
        # Sends what the state decided: at its start and after each batch of inputs.
        self._syncer = woken(self.sync)
        self.tick_sent = False
        self.counters = {"launched": 0, "reconciled": 0, "cancels_sent": 0}
        # Per runner, what it last said of Spark Connect: a start it refused because
        # Connect failed under it (unreachable, crashed), until a result comes from it.
        self.names = {a.member: name for name, a in self.addresses.items()}
        self.spark: dict[str, str] = {}

    def _table(self) -> JobTable:
        return self.owner.jobs  # read anew: a load may replace it

    # ------------------------------------------------------------ from handlers
    def wake(self) -> None:
        self._syncer.wake()

    # ------------------------------------------------------------ the tasks
    def chores(self) -> dict[str, Effect]:
        """The primary's long-lived tasks, each an effect with its retry declared."""
        return {"events": Chore(self._events), "syncer": self._syncer,
                "ticker": every(TICK_PERIOD, self._tick), "reconciles": self._reconciles}

    async def run(self) -> None:
        self.links.open()
        try:
            await chores(self.chores()).run()
        finally:
            await self.links.close()

    def _tick(self) -> None:
        now = time.time_ns()
        if not self.tick_sent and (self._table().timed_out(now)
                                   or self.owner.wants_job_tick(now)):
            self.tick_sent = True
            self.owner.impulse_self.job_tick()

    def sync(self) -> None:
        """Launch what the state decided and cancel what it cancelled."""
        table = self._table()
        jobs = self.links.jobs
        for job in self.plan.cancels(table,
                                     lambda j: jobs.state(j) is InitiatorState.RUNNING):
            self.links.cancel(job, 0, "cancelled by the coordinator")
            self.counters["cancels_sent"] += 1
        for go in self.plan.launches(table):
            # The protocol id is the one the state decided.
            self.links.start(go.name, go.params, [go.member], local_id=go.local_id)
            self.counters["launched"] += 1
            if self.links.connected(go.member):
                self.owner.impulse_self.job_started(go.key, go.local_id)  # the runner has it
                self.log.info("job %s: attempt %d started on %s (start %d)", go.key,
                              go.attempt, go.runner, go.local_id)
            else:
                self.log.info("job %s: attempt %d queued for %s, not linked yet (start %d)",
                              go.key, go.attempt, go.runner, go.local_id)

    # ------------------------------------------------------------ what runners say
    async def _events(self) -> None:
        me = self.owner.impulse_self
        while True:
            event = await self.links.next_event()
            if isinstance(event, Deliver):
                batch = event.batch
                key, result = self.plan.result(self._table(), batch.job_id, batch.edge)
                if key is not None:
                    self._spark_works(key)
                if key is not None and result:
                    me.job_batch(key, batch.job_id.local_id, batch.number, batch.rows,
                                 batch.last)
            elif isinstance(event, JobDone):
                self.links.jobs.forget(event.job_id)
            elif isinstance(event, JobCancelled):
                self._cancelled(event)
            elif isinstance(event, Held):
                self._held(event)
            elif isinstance(event, Connected):
                self._queued_sent(event.runner)

    def _queued_sent(self, runner: uuid.UUID) -> None:
        """A runner connected and was sent the starts queued for it: they are running."""
        for key, local in self.plan.queued_started(self._table(), runner):
            self.owner.impulse_self.job_started(key, local)

    def _cancelled(self, event: JobCancelled) -> None:
        cancel = event.cancel
        self.links.jobs.forget(cancel.job_id)
        verdict = self.plan.cancelled(self._table(), cancel)
        if verdict.spark_failed:
            self._spark_fails(cancel)
        key, local = verdict.key, cancel.job_id.local_id
        if key is None:
            return
        if verdict.meaning is CancelMeaning.LOST:  # not the job's fault: not counted
            self.owner.impulse_self.job_lost(key, local, False, cancel.message)
        elif verdict.meaning is CancelMeaning.FAILED:
            self.owner.impulse_self.job_failed(key, local, cancel.message)

    def _held(self, held: Held) -> None:
        plan = self.plan.held(self._table(), held)
        for key, local in plan.started:
            self.owner.impulse_self.job_started(key, local)
        for job in plan.cancel:
            with contextlib.suppress(IllegalJobTransitionError):  # ended meanwhile
                self.links.cancel(job, 0, "lost by its runner")
        if plan.reconcile:
            self._reconciles.wake()

    async def _reconcile(self, key: str, local: int) -> None:
        entry = self._table().jobs.get(key)
        if entry is None or entry.local_id != local:
            return
        attempt = Attempt(key, entry.attempt)
        verdict = await asyncio.to_thread(reconcile, attempt, self.cfg.out)
        self.counters["reconciled"] += 1
        self.log.info("job %s: attempt %d lost by its runner: %s", key, entry.attempt,
                      verdict.name)
        # Unknown: only Connect knows whether the write runs (even before its staging
        # exists), and the runner asks it (GetStatus) on this start: it re-attaches,
        # launches an attempt Spark never saw, or refuses (ATTEMPT_REUSED): n+1.
        partial = (verdict is Reconciled.UNKNOWN
                   and await asyncio.to_thread(attempt.staging(self.cfg.out).is_dir))
        same, why = lost_decision(verdict, partial)
        self.owner.impulse_self.job_lost(key, local, same, why)

    def _reconcile_failed(self, error: Exception, attempts: Attempts) -> float:
        """A reconciliation that could not read the output: said once a streak."""
        wait = attempts.next_wait()
        if attempts.worth_saying:
            again = "" if attempts.failures == 1 else f" ({attempts.failures} in a row)"
            self.log.warning("a lost start cannot be reconciled yet: %s%s; trying again in "
                             "%.0f s", error, again, wait)
        return wait

    def _spark_fails(self, cancel: Cancel) -> None:
        """A runner refused a start because Spark Connect failed under it."""
        runner = self.names.get(cancel.cancelled_by, str(cancel.cancelled_by))
        if runner not in self.spark:
            self.log.warning("runner %s cannot use Spark Connect: %s", runner, cancel.message)
        self.spark[runner] = (f"failing since {time.strftime('%H:%M:%S')}: "
                              f"{cancel.message[:200]}")

    def _spark_works(self, key: str) -> None:
        """A result came from the job's runner: its Spark Connect works again."""
        runner = self._table().runner_of(key)
        if self.spark.pop(runner, None) is not None:
            self.log.info("runner %s uses Spark Connect again", runner)

    def report(self) -> dict[str, Any]:
        return {"runners": {name: self.links.connected(a.member)
                            for name, a in self.addresses.items()},
                "spark": {name: self.spark.get(name, "no failure seen")
                          for name in self.addresses},
                **self.counters}
