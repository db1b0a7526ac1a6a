"""A deterministic simulation of the whole pipeline: a source, the word count immortal
with its job table, its runners, and one or two 2PC file sinks, in one process, driven
by one seeded scheduler (the shape of ``pipe_world``, which this world extends), so that a
crash between any two steps of a batch's life is tried: its lines staged, applied, cut
into a batch, its job launched, computed, committed and streamed by a runner, its result
logged, emitted in batch order, prepared, decided and committed at every sink, and its
staged blocks released and collected.

What runs is the real code, in memory:

- the coordinator is the real ``WordCountPipeline`` (its handlers, the
  ``SparkCoordinator`` job handlers, the ``JobTable``, the connector's ``ConnectorCore``)
  on the binding's real ``Engine``: every Impulse is a logged record, a checkpoint is the
  engine's own, and a crash is a new engine recovering from the last checkpoint and the
  records logged after it, then becoming primary again (``pipejobs_coord``);
- its primary's job links are the real ``JobsLive`` (what it asks the real ``LinkPlan``,
  the Impulses it sends: ``job_started``, ``job_batch``, ``job_lost``, ...), on the real
  ``JobLinks`` and ``InitiatorJobs``, each connection served by the real
  ``JobLinks._serve`` over the real ``JobConnection``; a lost start is reconciled by
  ``JobsLive._reconcile`` (the real ``attempts.reconcile`` over the output directory);
- the runners' outputs are committed by the real ``attempts.commit``; the source's lines
  are staged by the real ``SegmentWriter`` and read back by the runners' "Spark job"
  through the real ``read_payloads`` (a block that is not there fails the job);
- the sink side is ``pipe_world``'s: the real ``SinkSession`` at the coordinator's end of
  each sink connection, the real ``FileSinkStore`` answered by the real
  ``sinkanswer.answer`` at the other.

What is simulated is what moves bytes or computes: the source (each run of one or two
messages of stream 1, sent again from the first one not ACKed after the coordinator's
crash), the primary's I/O shells (``pipejobs_coord``: their sockets and tasks, stepped
here), the runners (``job_runner``: they hold their starts in this life, compute, commit
and stream; they crash, losing what they hold, and their connections drop; a runner
streams a result again on a new connection), the "Spark job" (a word count of the
batch's staged lines by ``words``' rule, as JSON lines), the sinks' disk (``pipe_disk``),
and the crashes: of the coordinator, of a runner and of a sink at any step, of a sink at
its disk calls and durable steps. The staging root and the output directory are not
crashed (what a power cut does to a coordinator's host is ``world``'s business; a
sink's is ``pipe_world``'s, and here too). Nothing is cut by time: a batch is cut as soon
as a line waits and fewer than ``jobs_in_flight`` jobs run, and jobs never time out.

Checked during the run: a transaction's decision never changes (``pipe_world``); no job
counts a failed attempt (the word count fails only when its staged lines are gone) and
no runner computes again a job whose output is committed, nor starts a new attempt of a
job after one committed (``job_runner``) (a job lost ``jobtable.MAX_LOSSES`` times would
fail by design: a run's faults are too few to lose one job that often); the collector
never takes a segment holding a block of a batch whose output some sink has not
committed (this world reckons each batch's blocks from its job's arguments and where its
output ends from the input, and compares with the coordinator's committed offsets).
Checked at the end of each run (faults stop, the world heals and runs until nothing is
left to do): each sink committed every batch once and in batch order, each batch's
output equal to ``format_batch`` of a word count of the input lines it covers, the
batches covering the input exactly; nothing is prepared at a sink nor in flight at the
coordinator; every COMMIT and ABORT a sink logged is the coordinator's decision on that
transaction; no job is left and none failed; every staged block is released and every
segment but the one being written is collected; and a new life replaying the log from
the checkpoint rebuilds the immortal's whole state (connector, job table, batches).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ambrosia_services.jobs.attempts import Attempt, member_id
from ambrosia_services.jobs.errors import JobProtocolError
from ambrosia_services.pipeline.live import coordinator_member
from ambrosia_services.pipeline.wordcount import format_batch
from ambrosia_services.pipeline.words import count_words
from ambrosia_services.staging import Ref, StagingError, read_payloads, segment_names

from .job_runner import JobRaised, Runner, RunnerSteps
from .pipe_coord import INSTANCE, config
from .pipe_world import _FAULTS, PipeWorld
from .pipejobs_coord import JobsCoordinator, StagingLive, new_loop
from .world import Step

__all__ = ["PipeJobsWorld"]

# A runner's steps here, apart from the coordinator's and the sinks' ("crash", ...).
_RUNNER_STEPS = RunnerSteps(up="runner-up", connect="runner-connect", read="to-runner",
                            send="from-runner", crash="runner-crash", drop="runner-drop",
                            again="runner-again")

RUNNERS = ("r0", "r1", "r2")
_JOB_STEPS = frozenset({"sync", "event", "reconcile", "collect", "runner-up",
                        "runner-connect", "to-runner", "from-runner", "work",
                        "runner-crash", "runner-drop", "runner-again"})


class PipeJobsWorld(PipeWorld):
    """``pipe_world`` with the word count's jobs: the runners and the job links."""

    coordinator = JobsCoordinator
    faults = _FAULTS | {"runner-crash", "runner-drop", "runner-again"}
    coord: JobsCoordinator | None

    def __init__(self, messages: list[bytes], sinks: int, runners: int,
                 settings: dict[str, Any], segment_bytes: int, directory: Path) -> None:
        super().__init__(0, 1, sinks, directory)
        self.payloads = messages
        self.lines = [line for m in messages for line in m.decode().splitlines()]
        self.staging = directory / "staging"
        self.out = directory / "out"
        self.segment_bytes = segment_bytes
        self.lives = 0
        self.batch_refs: dict[int, list[Ref]] = {}  # k -> its staged blocks (job n is batch n)
        self.batch_end: dict[int, int] = {}  # k -> where its output ends in a sink's stream
        self.loop = new_loop()
        names = RUNNERS[:runners]
        self.config = {**config(list(self.sinks)), **settings, "out": str(self.out),
                       "staging": str(self.staging),
                       "runners": [f"{n}@127.0.0.1:{9100 + i}" for i, n in enumerate(names)]}
        member = coordinator_member(INSTANCE)
        self.runners = {n: Runner(n, member_id(n), member, self.out, self._spark,
                                  self.fail, self.counts) for n in names}

    def close(self) -> None:
        self.loop.close()

    # -- the shells of a coordinator's life
    def make_live(self, _owner: Any, _cfg: Any) -> StagingLive:
        assert self.coord is not None
        self.coord.live = StagingLive(self, self.coord.app)
        return self.coord.live

    def make_jobs(self, owner: Any, cfg: Any) -> Any:
        assert self.coord is not None
        return self.coord.make_jobs(owner, cfg)

    def _spark(self, _attempt: Attempt, args: dict[str, Any]) -> bytes:
        """The "Spark job": word counts of the batch's staged lines, as JSON lines."""
        try:
            payloads = read_payloads(args["staging"], [Ref.from_list(r) for r in args["refs"]])
        except StagingError as err:
            raise JobRaised(str(err)) from None
        counts = count_words(p.decode() for p in payloads)
        return b"".join(json.dumps({"word": w, "count": n}).encode() + b"\n"
                        for w, n in sorted(counts.items()))

    # -- the steps
    def steps(self, faults: bool) -> list[Step]:
        out = super().steps(faults)
        coord = self.coord
        jobs = coord is not None and coord.jobs is not None
        if coord is not None and jobs:
            if coord.sync_due:
                out.append(("sync",))
            if coord.links._events.items:  # type: ignore[attr-defined]
                out.append(("event",))
            out += [("reconcile", local, key) for local, key in coord.reconciles()]
            if coord.doomed():
                out.append(("collect",))
        for r in self.runners.values():
            out += r.steps(faults, jobs, _RUNNER_STEPS)
        return out

    def do(self, step: Step) -> None:
        super().do(step)
        coord = self.coord
        if coord is None or coord.ic.instance is None:
            return
        table = coord.app.jobs
        failed = [k for k, e in table.jobs.items() if e.failures]
        if failed or table.counts["failed"]:
            self.fail(f"a job failed an attempt: {table.jobs.get(failed[0]) if failed else ''}"
                      f" {table.ended[-8:]}")
        if coord.app.results:
            self.counts["a later batch's result waited"] += 1

    def _do(self, step: Step) -> None:
        kind = step[0]
        if kind not in _JOB_STEPS:
            if kind == "crash" and step[1] == "coord":
                assert self.coord is not None
                self.coord.crash()
                for r in self.runners.values():
                    r.drop()
            super()._do(step)
            return
        try:
            self._job_step(step)
        except JobProtocolError as err:  # either end broke the jobs' protocol
            self.fail(f"the jobs' protocol was broken at {step}: {err}")

    def _job_step(self, step: Step) -> None:
        kind, *args = step
        coord = self.coord
        r = self.runners.get(args[0]) if args and isinstance(args[0], str) else None
        if kind == "sync":
            assert coord is not None
            coord.sync()
        elif kind == "event":
            assert coord is not None
            coord.event()
        elif kind == "reconcile":
            assert coord is not None
            self.counts["reconciled"] += 1
            coord.reconcile(args[0], args[1])
        elif kind == "collect":
            assert coord is not None
            self._collect(coord)
        elif kind == "runner-up":
            assert r is not None
            r.up = True
        elif kind == "runner-connect":
            assert coord is not None and r is not None
            coord.connect(r)
        elif kind == "to-runner":
            assert r is not None
            r.deliver(self._piece(r.inbox, args[1]))
        elif kind == "from-runner":
            assert coord is not None and r is not None
            coord.from_runner(r, self._piece(r.outbox, args[1]))
        elif kind == "work":
            assert r is not None
            r.work(args[1])
        else:  # the faults of a runner or its connection
            assert r is not None
            if kind == "runner-again":  # streamed again from batch 0 on a new connection
                r.holds[args[1]] = (r.holds[args[1]][0], 0)
            if coord is not None:
                coord.disconnect(r, "connection lost")
            if kind == "runner-crash":
                r.crash()
            else:
                r.drop()

    @staticmethod
    def _piece(queue: bytearray, fraction: float) -> bytes:
        """What one read takes of the bytes on their way (some of them, or all)."""
        n = max(1, round(len(queue) * fraction))
        data = bytes(queue[:n])
        del queue[:n]
        return data

    def observe(self, app: Any) -> None:
        """After every logged input: each batch the coordinator cut (its job's
        arguments name its staged blocks; job n is batch n), with where its output ends
        in every sink's stream, reckoned here from the input."""
        super().observe(app)
        for key, entry in app.jobs.jobs.items():
            k = int(key.rsplit("-", 1)[1])
            if k in self.batch_refs:
                continue
            refs = [Ref.from_list(r) for r in entry.args["refs"]]
            lines = [line for ref in refs for i in range(ref.first_id, ref.last_id + 1)
                     for line in self.payloads[i - 1].decode().splitlines()]
            size = len(format_batch(k, len(lines), sorted(count_words(lines).items())))
            self.batch_refs[k] = refs
            self.batch_end[k] = self.batch_end.get(k - 1, 0) + size

    def _collect(self, coord: JobsCoordinator) -> None:
        """A pass of the collector, which must not take the staged blocks of a batch
        whose output some sink has not committed (by the coordinator's decisions)."""
        doomed = set(coord.doomed())
        committed = min(rec.committed for rec in coord.app.core.sinks.values())
        for k, refs in sorted(self.batch_refs.items()):
            gone = [r.segment for r in refs if r.segment in doomed]
            if self.batch_end[k] > committed and gone:
                self.fail(f"the staged blocks of batch {k} were collected before its output "
                          f"was committed to every sink: {gone[0]}")
        for name in sorted(doomed):
            (self.staging / name).unlink()
            self.counts["segments collected"] += 1

    def _at_coordinator(self, coord: Any, step: Step) -> None:
        if step[0] != "send":
            super()._at_coordinator(coord, step)
            return
        first = self.sent
        n = min(step[1], len(self.payloads) - first)
        token = len(self.tokens)
        self.tokens.append((first, n))  # its ACK acks them all
        dropped = coord.stage(token, first + 1, self.payloads[first:first + n])
        if dropped:  # applied in an earlier life: dropped before staging, and the
            # source learns its point of reference (NOTIFY), so it does not send them again
            self.counts["re-sent and dropped"] += dropped
            self.acked.update(range(first, first + dropped))
        self.sent += n

    # -- the outcome
    def wanted_output(self, _name: str, got: bytes) -> bytes:
        """Every batch once, in order, each the word count of the lines it covers: the
        boundaries the coordinator cut are read from ``got``'s headers, and must cover
        the input exactly."""
        want = bytearray()
        at = 0
        for line in got.decode(errors="replace").splitlines():
            if not line.startswith("#"):
                continue
            fields = line.split("\t")
            n = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
            k = want.count(b"#batch") + 1
            want += format_batch(k, n, sorted(count_words(self.lines[at:at + n]).items()))
            at += n
        if at < len(self.lines):
            k = want.count(b"#batch") + 1
            rest = len(self.lines) - at
            want += format_batch(k, rest, sorted(count_words(self.lines[at:]).items()))
        return bytes(want)

    def check_end(self) -> None:
        super().check_end()
        coord = self.coord
        assert coord is not None
        app = coord.app
        if app.jobs.jobs or app.pending or app.batches or app.results or app.uncommitted:
            self.fail(f"left over: jobs {sorted(app.jobs.jobs)}, {len(app.pending)} runs "
                      f"pending, batches {sorted(app.batches)}, results {sorted(app.results)}"
                      f", {len(app.uncommitted)} batches not committed everywhere")
        if app.core.segments or app.core.backlog:
            self.fail(f"staged blocks still held: {app.core.segments}, backlog "
                      f"{app.core.backlog}")
        left = set(segment_names(self.staging)) - {coord.writer.current}
        if left:
            self.fail(f"staged segments never collected: {sorted(left)}")
        self.counts["batches"] += app.cut
        self.counts["attempts beyond the first"] += app.jobs.counts["attempts"] - app.cut
