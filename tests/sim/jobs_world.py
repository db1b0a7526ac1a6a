"""A deterministic simulation of the job table and its runners: the pipeline's batches
turned into jobs, launched on runners that crash, lose their connections and stream
their results again, in one process, driven by one seeded scheduler (``world``'s shape).

What runs is the real code: the coordinator's decisions are the real ``JobTable`` (its
state survives a coordinator's crash through its state form, as the log and checkpoint
keep it); what the primary's links decide is the real ``LinkPlan`` that ``JobsLive``
asks (launches, cancels, ``Held``, a runner's cancel, ``lost_decision``); a lost start is
reconciled by the real ``attempts.reconcile`` over the real output directory, and a
runner commits its staging by the real ``attempts.commit`` (a rename).

The link between the coordinator and each runner is the jobs' wire protocol: each end is
the real ``JobConnection`` (framing, which side may send what, batch numbers in order
once per connection, credits), its bytes on their way read in pieces, and lost when the
connection drops. What is simulated: the runner (``job_runner``: it holds the starts it
was given in this life, writes its staging in two steps, marks it finished, commits it,
and streams its result in batches; on a start whose output is committed or finished it
commits and streams without running; on one with partial staging it refuses,
``ATTEMPT_REUSED``, as its Spark answering ``GetStatus`` after a crash would), and the
"Spark job": a word count of the batch's lines. This world keeps the primary's side
small (its own stand-in for the links' shell: no engine, no ``InitiatorJobs``, no sinks);
``pipejobs_world`` runs the same runners against the real pipeline immortal, its real
``JobsLive``, ``JobLinks`` and ``InitiatorJobs``, the results flowing on to the 2PC sinks.
The runners' ``ParticipantJobs`` is in neither.

Checked at the end of every run: every batch's result taken once, in order; the totals
equal a word count of the whole input; nothing left running; and during the run no job
counts a failed attempt (the word count never raises: a runner's loss is no failure), no
runner computes a job whose output is already committed, and no job is started as a new
attempt once one of its attempts committed.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from ambrosia_services.jobs import Batch, Cancel, JobId, Start
from ambrosia_services.jobs.attempts import Attempt, member_id, reconcile
from ambrosia_services.jobs.errors import JobProtocolError
from ambrosia_services.jobs.link import Held
from ambrosia_services.jobs.messages import JobMessage
from ambrosia_services.pipeline import linkplan
from ambrosia_services.pipeline.jobtable import JobTable
from ambrosia_services.pipeline.linkplan import CancelMeaning, LinkPlan
from ambrosia_services.pipeline.live import coordinator_member

from .job_runner import Runner, RunnerSteps
from .world import SimFailure, Step

__all__ = ["JobsWorld"]

# A runner's steps here: the coordinator's are "submit", "sync", "crash" of "coord", ...
_RUNNER_STEPS = RunnerSteps(up="restart", connect="connect", read="deliver", send="receive",
                            crash="crash", drop="drop", again="again")

INSTANCE = "sim"
JOB = "wordcount"
FAULTS = frozenset({"crash", "drop", "again"})


def word_count(lines: list[str]) -> bytes:
    counts = collections.Counter(w for line in lines for w in line.split())
    return b"".join(json.dumps([w, n]).encode() + b"\n" for w, n in sorted(counts.items()))


class JobsWorld:
    def __init__(self, inputs: list[list[str]], runners: int, out: Path) -> None:
        self.inputs = inputs
        self.out = out
        self.member = coordinator_member(INSTANCE)
        self.counts: collections.Counter[str] = collections.Counter()
        self.runners = {n: Runner(n, member_id(f"runner/{n}"), self.member, out, self._spark,
                                  self.fail, self.counts)
                        for n in ("r0", "r1", "r2")[:runners]}
        self.table = JobTable()
        self.table.configure(INSTANCE, {"runners": list(self.runners), "max_attempts": 3})
        self.plan: LinkPlan | None = None  # the primary's links, in this life
        self.running: dict[int, str] = {}  # starts the link runs: local -> runner
        self.queued: dict[str, list[int]] = collections.defaultdict(list)
        self.reconciles: list[tuple[int, str]] = []
        self.results: dict[int, bytes] = {}  # batch -> its whole result (logged)
        self.taken: list[int] = []  # batches whose result the sink side took, in order
        self.totals: collections.Counter[str] = collections.Counter()
        self.trace: list[Step] = []

    def _spark(self, attempt: Attempt, _args: dict[str, Any]) -> bytes:
        """The "Spark job": a word count of the batch's lines."""
        return word_count(self.inputs[int(attempt.job.rsplit("-", 1)[1]) - 1])

    # -- the coordinator's decisions (logged: they survive its crash)
    def _took(self, key: str, result: bytes) -> None:
        batch = int(key.rsplit("-", 1)[1]) - 1
        if batch in self.results:
            self.fail(f"batch {batch}'s result taken twice")
        self.results[batch] = result
        while len(self.taken) in self.results:  # on to the sinks, in batch order
            k = len(self.taken)
            self.taken.append(k)
            for line in self.results[k].splitlines():
                word, n = json.loads(line)
                self.totals[word] += n

    # -- the steps
    def steps(self, faults: bool) -> list[Step]:
        out: list[Step] = []
        if self.plan is None:
            out.append(("restart", "coord"))
        else:
            if self.table.jobs_decided < len(self.inputs):
                out.append(("submit",))
            if self._sync_due():
                out.append(("sync",))
            if self.reconciles:
                out.append(("reconcile",))
            if faults:
                out.append(("crash", "coord"))
        for r in self.runners.values():
            out += r.steps(faults, self.plan is not None, _RUNNER_STEPS)
        return out

    def _sync_due(self) -> bool:
        assert self.plan is not None
        return (any(e.local_id not in self.plan.launched for e in self.table.jobs.values())
                or any(local in self.running for local in self.table.cancels))

    def do(self, step: Step) -> None:
        self.trace.append(step)
        self.counts[step[0]] += 1
        try:
            self._do(step)
        except JobProtocolError as err:  # either end broke the jobs' protocol
            self.fail(f"the jobs' protocol was broken at {step}: {err}")

    def _do(self, step: Step) -> None:
        kind, *args = step
        if kind == "restart" and args[0] == "coord":
            self.plan = LinkPlan(self.member, {n: r.member for n, r in self.runners.items()},
                                 self.table)
            self.running = {local: self._name(m) for local, m in self.plan.records.items()}
        elif kind == "restart":
            self.runners[args[0]].up = True
        elif kind == "crash" and args[0] == "coord":
            self.counts["coordinator crashed"] += 1
            self.plan = None
            self.running, self.reconciles = {}, []
            self.queued.clear()
            for name in self.runners:
                self._drop(name)
            self.table = JobTable.from_state(self.table.to_state())  # what the log keeps
        elif kind == "crash":
            self.runners[args[0]].crash()
        elif kind == "drop":
            self._drop(args[0])
        elif kind == "again":  # the runner streams a result again, from batch 0, on a
            # new connection (one connection carries each batch number once: the
            # protocol's batch order rule)
            r = self.runners[args[0]]
            r.holds[args[1]] = (r.holds[args[1]][0], 0)
            self._drop(r.name)
        elif kind == "submit":
            self.table.submit("wordcount", {})
        elif kind == "sync":
            self._sync()
        elif kind == "reconcile":
            self._reconcile(*self.reconciles.pop(0))
        elif kind == "connect":
            self._connect(self.runners[args[0]])
        elif kind == "deliver":
            r = self.runners[args[0]]
            r.deliver(self._piece(r.inbox, args[1]))
        elif kind == "receive":
            r = self.runners[args[0]]
            assert r.coord_end is not None
            r.coord_end.receive_data(self._piece(r.outbox, args[1]))
            for message in r.coord_end.events():
                self._at_coordinator(message)
        elif kind == "work":
            self.runners[args[0]].work(args[1])
        failed = [k for k, e in self.table.jobs.items() if e.failures]
        if failed:  # the word count never raises: only losses happen here
            self.fail(f"job {failed[0]} counts a failed attempt: {self.table.jobs[failed[0]]}")

    def _name(self, member: Any) -> str:
        return next(n for n, r in self.runners.items() if r.member == member)

    def _drop(self, name: str) -> None:
        self.runners[name].drop()

    @staticmethod
    def _piece(queue: bytearray, fraction: float) -> bytes:
        """What one read takes of the bytes on their way (some of them, or all)."""
        n = max(1, round(len(queue) * fraction))
        data = bytes(queue[:n])
        del queue[:n]
        return data

    def _start(self, r: Runner, local: int, params: dict[str, Any]) -> None:
        r.to_runner(Start(JobId(self.member, local), JOB, params, (r.member,)))

    # -- the primary's links (JobsLive's shell, around the real LinkPlan)
    def _sync(self) -> None:
        assert self.plan is not None
        for job in self.plan.cancels(self.table, lambda j: j.local_id in self.running):
            runner = self.runners[self.running.pop(job.local_id)]
            if runner.linked:
                runner.to_runner(Cancel(job, self.member, 0, "cancelled"))
        for go in self.plan.launches(self.table):
            self.running[go.local_id] = go.runner
            r = self.runners[go.runner]
            if r.linked:
                self._start(r, go.local_id, go.params)
                self.table.started(go.key, go.local_id)
            else:
                self.queued[go.runner].append(go.local_id)

    def _connect(self, r: Runner) -> None:
        assert self.plan is not None
        r.open()  # a new connection: what the runner holds streams again from batch 0
        mine = sorted(local for local, name in self.running.items()
                      if name == r.name and local not in self.queued[r.name])
        held = Held(r.member, tuple(JobId(self.member, x) for x in mine if x in r.holds),
                    tuple(JobId(self.member, x) for x in mine if x not in r.holds))
        answer = self.plan.held(self.table, held)
        for key, local in answer.started:
            self.table.started(key, local)
        for job in answer.cancel:
            self.running.pop(job.local_id, None)
        self.reconciles += answer.reconcile
        self.counts["lost"] += len(answer.cancel)
        by_local = self.table.by_local()
        for local in self.queued.pop(r.name, []):
            current = by_local.get(local)
            if current is not None:
                entry = self.table.jobs[current]
                self._start(r, local, {"job": current, "attempt": entry.attempt})
        for key, local in self.plan.queued_started(self.table, r.member):
            self.table.started(key, local)

    def _reconcile(self, local: int, key: str) -> None:
        entry = self.table.jobs.get(key)
        if entry is None or entry.local_id != local:
            return
        attempt = Attempt(key, entry.attempt)
        verdict = reconcile(attempt, self.out)
        same, why = linkplan.lost_decision(verdict, attempt.staging(self.out).is_dir())
        self.counts[f"reconciled {verdict.name}"] += 1
        self.table.lost(key, local, same, why)

    def _at_coordinator(self, message: JobMessage) -> None:
        assert self.plan is not None and isinstance(message, (Cancel, Batch)), message
        job = message.job_id
        local = job.local_id
        if isinstance(message, Cancel):
            self.running.pop(local, None)
            verdict = self.plan.cancelled(self.table, message)
            if verdict.meaning is CancelMeaning.LOST and verdict.key is not None:
                self.table.lost(verdict.key, local, False, "refused")
            elif verdict.meaning is CancelMeaning.FAILED and verdict.key is not None:
                self.table.failed(verdict.key, local, "refused")
            return
        number, rows, last = message.number, message.rows, message.last
        key, is_result = self.plan.result(self.table, job, message.edge)
        if key is None or not is_result:
            return
        whole = self.table.batch(key, local, number, rows, last)
        if whole is not None:
            self.running.pop(local, None)
            self._took(key, whole)

    # -- runs
    def run(self, rng: Any, fault_steps: int, fault_rate: float) -> None:
        self.do(("restart", "coord"))
        for name in self.runners:
            self.do(("restart", name))
        for _ in range(fault_steps):
            every = self.steps(faults=True)
            progress = [s for s in every if s[0] not in FAULTS]
            faults = [s for s in every if s[0] in FAULTS]
            if faults and (not progress or rng.random() < fault_rate):
                kind = rng.choice(sorted({f[0] for f in faults}))
                self.do(rng.choice([f for f in faults if f[0] == kind]))
            elif progress:
                self.do(rng.choice(progress))
        self.settle(rng)

    def replay(self, trace: list[Step], rng: Any) -> None:
        for step in trace:
            if step in self.steps(faults=True):
                self.do(step)
        self.settle(rng)

    def settle(self, rng: Any, end_steps: int = 5000) -> None:
        for _ in range(end_steps):
            progress = self.steps(faults=False)
            if len(self.taken) == len(self.inputs) and not self.table.jobs:
                self.check_end()
                return
            if not progress:
                break
            self.do(rng.choice(progress))
        self.fail(f"no end: {len(self.taken)} of {len(self.inputs)} batches taken, jobs "
                  f"left {sorted(self.table.jobs)}")

    def fail(self, message: str) -> None:
        raise SimFailure(message, list(self.trace))

    def check_end(self) -> None:
        want = collections.Counter(w for lines in self.inputs for line in lines
                                   for w in line.split())
        if self.totals != want:
            self.fail(f"the totals {dict(self.totals)} are not the input's {dict(want)}")
        if self.table.counts["done"] != len(self.inputs) or self.table.counts["failed"]:
            self.fail(f"job counts {self.table.counts} for {len(self.inputs)} batches")
