"""The simulated job runner of the job worlds (``jobs_world``, ``pipejobs_world``): the
starts it holds in this life, its connection to the coordinator, and what it does with a
start, as the real runner does it around Spark.

The connection is the jobs' wire protocol: the runner's end is the real ``JobConnection``
(framing, which side may send what, batch numbers in order once per connection,
credits), its bytes on their way read in pieces and lost when the connection drops. The
runner holds the starts it was given in this life, writes its staging in two steps
(the "Spark job" computes the output, then marks it finished), commits it by the real
``attempts.commit`` (a rename), and streams its result in batches; on a start whose
output is committed or finished it commits and streams without running; on one with
partial staging it refuses (``ATTEMPT_REUSED``), as its Spark answering ``GetStatus``
after a crash would; a job that raises (its input unreadable) is refused as failed
(``JOB_FAILED``), as the real runner reports an attempt whose write failed. On a new
connection it says what it holds (``check``) and drops what the answer lists inactive.
"""

from __future__ import annotations

import collections
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from ambrosia_services.jobs import Batch, Cancel, JobId, Start
from ambrosia_services.jobs._state import Role
from ambrosia_services.jobs.attempts import (
    SUCCESS,
    Attempt,
    RunnerCancelCode,
    commit,
    committed_attempt,
    is_finished,
)
from ambrosia_services.jobs.connection import JobConnection
from ambrosia_services.jobs.initiator import RESULT_EDGE
from ambrosia_services.jobs.messages import Check, CheckResponse, FlowControl, JobMessage

__all__ = ["ROWS_PER_BATCH", "JobRaised", "Runner"]

ROWS_PER_BATCH = 2


class JobRaised(Exception):  # noqa: N818 (the job's own failure, as its runner reports it)
    """The "Spark job" failed (its input could not be read): the attempt fails."""


#: The "Spark job": the bytes of an attempt's output (JSON lines) from its arguments.
Spark = Callable[[Attempt, dict[str, Any]], bytes]


@attrs.frozen
class RunnerSteps:
    """What a world calls each kind of a runner's steps (``Runner.steps``)."""

    up: str
    connect: str
    read: str
    send: str
    crash: str
    drop: str
    again: str


class Runner:
    """One simulated runner: the starts it holds in this life, by local id, and its
    connection to the coordinator while it has one: the runner's end (the real
    ``JobConnection``) and the bytes on their way each way. ``coord_end`` is the
    coordinator's end where the world keeps it here (``jobs_world``)."""

    def __init__(self, name: str, member: uuid.UUID, initiator: uuid.UUID, out: Path,
                 spark: Spark, fail: Callable[[str], None],
                 counts: collections.Counter[str]) -> None:
        self.name = name
        self.member = member
        self.initiator = initiator  # the coordinator's member id
        self.out = out
        self.spark = spark
        self.fail = fail
        self.counts = counts
        self.up = False
        self.holds: dict[int, tuple[Attempt, int]] = {}  # local -> (attempt, batches sent)
        self.args: dict[int, dict[str, Any]] = {}  # local -> the job's arguments
        self._committed: dict[Attempt, list[bytes]] = {}  # committed outputs, as batches
        self.inbox = bytearray()  # what the coordinator sent on the connection
        self.outbox = bytearray()  # what it sends the coordinator
        self.coord_end: JobConnection | None = None
        self.runner_end: JobConnection | None = None

    def steps(self, faults: bool, may_connect: bool, names: RunnerSteps) -> list[Any]:
        """The steps this runner can take now, each named as its world names it: come
        up; or connect (``may_connect``: there is a coordinator to link to), read and
        send bytes in pieces, do work held; with ``faults``, crash, lose its connection,
        or send a start's result again."""
        n, name = names, self.name
        if not self.up:
            return [(n.up, name)]
        out: list[Any] = []
        if may_connect and not self.linked:
            out.append((n.connect, name))
        if self.inbox:
            out += [(n.read, name, 1.0), (n.read, name, 0.5)]
        if self.outbox:
            out += [(n.send, name, 1.0), (n.send, name, 0.5)]
        out += [("work", name, local) for local in sorted(self.holds) if self.work_due(local)]
        if faults:
            out.append((n.crash, name))
            if self.linked:
                out.append((n.drop, name))
            out += [(n.again, name, local) for local, (_, sent) in sorted(self.holds.items())
                    if sent]
        return out

    @property
    def linked(self) -> bool:
        return self.runner_end is not None

    def open(self) -> None:
        """A new connection (the coordinator's end too, for a world that keeps it here):
        what the runner holds streams again from batch 0."""
        self.coord_end = JobConnection(Role.INITIATOR, Role.PARTICIPANT)
        self.runner_end = JobConnection(Role.PARTICIPANT, Role.INITIATOR)
        self.holds = {local: (attempt, 0) for local, (attempt, _) in self.holds.items()}

    def drop(self) -> None:
        """The connection is gone, with the bytes on their way."""
        self.coord_end = self.runner_end = None
        self.inbox, self.outbox = bytearray(), bytearray()

    def crash(self) -> None:
        self.drop()
        self.up, self.holds, self.args = False, {}, {}

    def to_runner(self, message: JobMessage) -> None:
        assert self.coord_end is not None
        self.inbox += self.coord_end.send(message)

    def to_coordinator(self, message: JobMessage) -> None:
        assert self.runner_end is not None
        self.outbox += self.runner_end.send(message)

    def check(self) -> None:
        """On a new connection: the jobs of the coordinator it holds (``check``)."""
        self.to_coordinator(Check(tuple(JobId(self.initiator, local)
                                        for local in sorted(self.holds))))

    def deliver(self, data: bytes) -> None:
        """Bytes from the coordinator reach the runner's end."""
        assert self.runner_end is not None
        self.runner_end.receive_data(data)
        for message in self.runner_end.events():
            self.receive(message)

    # -- what the runner does
    def receive(self, message: JobMessage) -> None:
        if isinstance(message, FlowControl):
            return  # credits are the connection's business
        if isinstance(message, CheckResponse):
            for job in message.inactive:
                self.holds.pop(job.local_id, None)
            return
        assert isinstance(message, (Cancel, Start)), message
        local = message.job_id.local_id
        if isinstance(message, Cancel):
            self.holds.pop(local, None)
            return
        attempt = Attempt(message.params["job"], message.params["attempt"])
        staging = attempt.staging(self.out)
        done = committed_attempt(self.out, attempt.job)
        if done is not None and done != attempt.number:
            self.fail(f"job {attempt.job} relaunched as attempt {attempt.number} after "
                      f"attempt {done} committed")
        if (is_finished(attempt.final(self.out)) or is_finished(staging)
                or not staging.exists()):
            self.holds[local] = (attempt, 0)
            self.args[local] = dict(message.params.get("args", {}))
        else:  # partial staging: its Spark lost the write; a new attempt is needed
            self.counts["refused"] += 1
            self.to_coordinator(Cancel(message.job_id, self.member,
                                       int(RunnerCancelCode.ATTEMPT_REUSED), "refused"))

    def committed(self, attempt: Attempt) -> list[bytes] | None:
        """The batches of ``attempt``'s committed output (None: not committed); a
        committed output never changes, so it is read once."""
        chunks = self._committed.get(attempt)
        if chunks is None and is_finished(attempt.final(self.out)):
            final = attempt.final(self.out) / "part-0"
            lines = final.read_bytes().splitlines(keepends=True) if final.exists() else []
            chunks = self._committed[attempt] = [
                b"".join(lines[i:i + ROWS_PER_BATCH])
                for i in range(0, len(lines), ROWS_PER_BATCH)] or [b""]
        return chunks

    def work_due(self, local: int) -> bool:
        attempt, sent = self.holds[local]
        chunks = self.committed(attempt)
        return self.linked and (chunks is None or sent < len(chunks))

    def work(self, local: int) -> None:
        """One step of a held start: write the staging (two files), mark it finished,
        commit it; then stream its result one batch a step."""
        attempt, sent = self.holds[local]
        staging = attempt.staging(self.out)
        chunks = self.committed(attempt)
        if chunks is None:
            if not is_finished(staging):
                try:
                    self._compute(attempt, staging, self.args.get(local, {}))
                except JobRaised as err:
                    self.counts["job raised"] += 1
                    del self.holds[local]
                    self.to_coordinator(Cancel(JobId(self.initiator, local), self.member,
                                               int(RunnerCancelCode.JOB_FAILED), str(err)))
            else:
                commit(attempt, self.out)
                self.counts["committed"] += 1
            return
        self.to_coordinator(Batch(JobId(self.initiator, local), RESULT_EDGE, sent,
                                  chunks[sent], sent == len(chunks) - 1))
        self.holds[local] = (attempt, sent + 1)

    def _compute(self, attempt: Attempt, staging: Path, args: dict[str, Any]) -> None:
        if is_finished(attempt.final(self.out)):
            self.fail(f"job {attempt.job} computed again after its output was committed")
        if not (staging / "part-0").exists():
            if staging.exists():
                shutil.rmtree(staging)
            output = self.spark(attempt, args)
            staging.mkdir(parents=True)
            (staging / "part-0").write_bytes(output)
        else:
            (staging / SUCCESS).write_bytes(b"")
