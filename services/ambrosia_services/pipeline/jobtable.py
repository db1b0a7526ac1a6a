"""The coordinator's deterministic job table: which jobs were decided, which attempt of
each is current, what of its result has arrived, and how each ended. No I/O at all.

Every change is a function of a logged input (a handler calls these methods with its
arguments), so a replay, or a new primary after a failover, rebuilds the same table, the
same job keys and the same attempt numbers. The primary's I/O (``live.JobsLive``) only
reads it: it launches the current attempt of every running job, cancels what was asked,
and sends what it saw back as Impulses.

Identities. A job's key is ``<instance>-<n>`` (n counts the jobs decided, from 1); its
attempts are numbered 1, 2, ... and only ever rise, so no operation id (``Attempt``'s
uuid5 of key and number) is ever launched twice. Each protocol ``start`` gets a local id
of its own from ``next_local`` (a start of the *same* attempt again, to have committed
output streamed, is a new start of an old attempt, never a new operation).

Results. A runner sends the committed output as batches numbered from 0; a batch is kept
only if it is the next one of the current start (``expected``), so a stream sent again
from batch 0 after a reconnect is dropped up to where it had got.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

import attrs

__all__ = ["KEEP_ENDED", "MAX_LOSSES", "Ended", "JobEntry", "JobTable", "JobPhase"]

KEEP_ENDED: Final = 64  # ended jobs remembered by key (and cancels the primary must send)
# Starts of one job lost by its runners (each a new attempt, not a failure of the job's
# code) before the job fails: a request every runner refuses would otherwise be started
# again for ever.
MAX_LOSSES: Final = 12


class JobPhase(enum.Enum):
    """Where a job stands. DECIDED: an attempt is decided, its start not yet seen to reach
    a runner; RUNNING: a runner took it (or streams its result)."""

    DECIDED = "decided"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@attrs.define
class JobEntry:
    """A job not yet ended."""

    name: str
    args: dict[str, Any]
    attempt: int = 1
    local_id: int = 0  # the protocol local id of the current start
    phase: JobPhase = JobPhase.DECIDED
    expected: int = 0  # the next result batch number of the current start
    rows: bytearray = attrs.field(factory=bytearray)
    failures: list[str] = attrs.field(factory=list)  # why each failed attempt failed
    starts: int = 1  # protocol starts made for this job (attempts and restreams)
    losses: int = 0  # starts lost by a runner that decided a new attempt
    since_ns: int = 0  # logged time the current start was decided (0: not known)

    def to_state(self) -> list[Any]:
        """The fields as plain data, in declaration order (new fields go at the end)."""
        return [self.name, self.args, self.attempt, self.local_id, self.phase.value,
                self.expected, bytes(self.rows), list(self.failures), self.starts,
                self.losses, self.since_ns]

    @classmethod
    def from_state(cls, fields: Sequence[Any]) -> JobEntry:
        """Also from older checkpoints, written before ``losses`` and ``since_ns``."""
        name, args, attempt, local_id, phase, expected, rows, failures, starts, *later = fields
        losses, since_ns = [*later, 0, 0][:2]
        return cls(name=name, args=dict(args), attempt=attempt, local_id=local_id,
                   phase=JobPhase(phase), expected=expected, rows=bytearray(rows),
                   failures=list(failures), starts=starts, losses=losses, since_ns=since_ns)


@attrs.frozen
class Ended:
    """How a job ended: what the status shows of a forgotten job."""

    key: str
    phase: JobPhase
    attempts: int
    reason: str = ""



class JobTable:
    """Jobs decided by one coordinator (see the module docstring)."""

    def __init__(self) -> None:
        self.instance = ""
        self.settings: dict[str, Any] = {}  # the configuration's decision part
        self.max_attempts = 3
        self.runners: list[str] = []
        self.jobs_decided = 0  # the n of the last key
        self.next_local = 0  # the protocol local id of the next start
        self.jobs: dict[str, JobEntry] = {}
        self.ended: list[Ended] = []  # newest last, at most KEEP_ENDED
        self.cancels: list[int] = []  # local ids of starts to cancel, newest last
        self.counts = {"done": 0, "failed": 0, "cancelled": 0, "attempts": 0}

    # ------------------------------------------------------------ settings
    def configure(self, instance: str, settings: dict[str, Any]) -> None:
        """The configuration's decision part (``PipelineConfig.decision_part``): the
        runners (by address) and ``max_attempts``; the rest is the app's."""
        self.instance = instance
        self.settings = dict(settings)
        self.settings["runners"] = list(settings["runners"])
        self.runners = list(settings["runners"])
        self.max_attempts = int(settings["max_attempts"])

    @property
    def timeout_ns(self) -> int:
        """How long a start may go without its whole result before its attempt fails
        (``job_timeout_seconds``; 0: for ever)."""
        return int(float(self.settings.get("job_timeout_seconds", 0)) * 1e9)

    # ------------------------------------------------------------ decisions
    def submit(self, name: str, args: dict[str, Any], now_ns: int = 0) -> str:
        """Decide a new job at logged time ``now_ns``; returns its key. Its attempt 1 is
        decided with it."""
        self.jobs_decided += 1
        key = f"{self.instance}-{self.jobs_decided}"
        self.jobs[key] = JobEntry(name, dict(args), local_id=self._take_local(),
                                  since_ns=now_ns)
        self.counts["attempts"] += 1
        return key

    def cancel(self, key: str, reason: str) -> bool:
        """Cancel a job not ended: its current start is to be cancelled at the runner.
        Returns whether it was running (False: unknown or already ended)."""
        entry = self.jobs.get(key)
        if entry is None:
            return False
        self._remember(self.cancels, entry.local_id)
        self._end(key, JobPhase.CANCELLED, reason)
        return True

    # ------------------------------------------------------------ what came back
    def started(self, key: str, local_id: int) -> None:
        """A runner holds the start (its check listed it, or a batch of it arrived)."""
        entry = self._current(key, local_id)
        if entry is not None and entry.phase is JobPhase.DECIDED:
            entry.phase = JobPhase.RUNNING

    def batch(self, key: str, local_id: int, number: int, rows: bytes,
              last: bool) -> bytes | None:
        """A result batch. Returns the whole result (JSON lines) when this was its last
        batch and the job is now done; None otherwise. Batches of an old start, of an
        ended job, or whose number is not the next (a re-send) change nothing."""
        entry = self._current(key, local_id)
        if entry is None or number != entry.expected:
            return None
        entry.phase = JobPhase.RUNNING
        entry.expected += 1
        entry.rows += rows
        if not last:
            return None
        result = bytes(entry.rows)
        self._end(key, JobPhase.DONE, "")
        return result

    def unreadable(self, key: str, reason: str) -> None:
        """The job's whole result arrived (``batch`` ended it as done) but cannot be read:
        it counts as failed, not done."""
        found = next((i for i in range(len(self.ended) - 1, -1, -1)
                      if self.ended[i].key == key and self.ended[i].phase is JobPhase.DONE), None)
        if found is None:
            return
        self.ended[found] = attrs.evolve(self.ended[found], phase=JobPhase.FAILED, reason=reason)
        self.counts["done"] -= 1
        self.counts["failed"] += 1

    def failed(self, key: str, local_id: int, reason: str, now_ns: int = 0) -> bool:
        """The current start failed (the job raised, or Spark lost it). Returns True when
        this was the last attempt allowed (the job has failed); else attempt n+1 is
        decided (at logged time ``now_ns``)."""
        entry = self._current(key, local_id)
        if entry is None:
            return False
        entry.failures.append(reason)
        if entry.attempt >= self.max_attempts:
            self._end(key, JobPhase.FAILED, reason)
            return True
        self._next_attempt(entry, now_ns)
        return False

    def timed_out(self, now_ns: int) -> list[str]:
        """Jobs whose current start has gone ``timeout_ns`` without its whole result, by
        logged time (a runner hung, stopped, or cut off from Spark), oldest first."""
        limit = self.timeout_ns
        if not limit:
            return []
        return [k for k, e in self.jobs.items() if e.since_ns and now_ns - e.since_ns >= limit]

    def expire(self, key: str, now_ns: int) -> bool:
        """The current start of ``key`` timed out: it fails as an attempt, so the next
        one goes to the next runner (returns True when that was the last)."""
        entry = self.jobs[key]
        return self.failed(key, entry.local_id, f"no result within "
                           f"{self.timeout_ns / 1e9:g} s from {self.runner_of(key)}", now_ns)

    def lost(self, key: str, local_id: int, same_attempt: bool, why: str = "",
             now_ns: int = 0) -> bool:
        """Reconciliation after a crash: nothing of the current start runs any more.
        ``same_attempt``: its output is committed or its staging finished, so the same
        attempt is started again (the runner commits or streams it, never runs it);
        otherwise attempt n+1 is decided. Neither counts as a failure of the job's code,
        but the ``MAX_LOSSES``-th loss ends the job as failed (``why`` says the last):
        returns True then."""
        entry = self._current(key, local_id)
        if entry is None:
            return False
        self._remember(self.cancels, entry.local_id)
        if not same_attempt:
            entry.losses += 1
            if entry.losses >= MAX_LOSSES:
                self._end(key, JobPhase.FAILED, f"lost by its runners {entry.losses} times "
                                             f"(the last: {why or 'no reason given'})")
                return True
        if same_attempt:
            entry.local_id = self._take_local()
            entry.starts += 1
            entry.phase = JobPhase.DECIDED
            entry.expected = 0
            entry.rows.clear()
            entry.since_ns = now_ns
        else:
            self._next_attempt(entry, now_ns)
        return False

    # ------------------------------------------------------------ queries
    def runner_of(self, key: str) -> str:
        """The runner the current attempt runs on: round robin over the configured ones
        by job number and attempt, so a retry goes elsewhere when there is elsewhere."""
        entry = self.jobs[key]
        n = int(key.rsplit("-", 1)[1])
        return self.runners[(n + entry.attempt) % len(self.runners)]

    def by_local(self) -> dict[int, str]:
        """Current starts: local id -> job key."""
        return {e.local_id: k for k, e in self.jobs.items()}

    def status(self) -> dict[str, Any]:
        """Jobs decided; of those not ended, waiting (their current start not yet seen
        at a runner) and running (a runner took it); done, failed, cancelled; and
        attempts decided (first attempts, retries and new attempts after a loss).
        ``waiting + running + done + failed + cancelled == decided`` always."""
        phases = [e.phase for e in self.jobs.values()]
        return {
            "decided": self.jobs_decided,
            "waiting": phases.count(JobPhase.DECIDED),
            "running": phases.count(JobPhase.RUNNING),
            **self.counts,
            "recent": [[e.key, e.phase.value, e.attempts, e.reason] for e in self.ended[-8:]],
        }

    # ------------------------------------------------------------ rules
    def _current(self, key: str, local_id: int) -> JobEntry | None:
        entry = self.jobs.get(key)
        return entry if entry is not None and entry.local_id == local_id else None

    def _take_local(self) -> int:
        self.next_local += 1
        return self.next_local - 1

    def _next_attempt(self, entry: JobEntry, now_ns: int) -> None:
        self._remember(self.cancels, entry.local_id)
        entry.since_ns = now_ns
        entry.attempt += 1
        entry.local_id = self._take_local()
        entry.starts += 1
        entry.phase = JobPhase.DECIDED
        entry.expected = 0
        entry.rows.clear()
        self.counts["attempts"] += 1

    def _end(self, key: str, phase: JobPhase, reason: str) -> None:
        entry = self.jobs.pop(key)
        self.counts[phase.value] += 1
        self.ended.append(Ended(key, phase, entry.attempt, reason))
        del self.ended[:-KEEP_ENDED]

    @staticmethod
    def _remember(items: list[int], value: int) -> None:
        items.append(value)
        del items[:-KEEP_ENDED]

    # ------------------------------------------------------------ checkpoint
    def to_state(self) -> dict[str, Any]:
        return {
            "instance": self.instance, "settings": dict(self.settings),
            "max_attempts": self.max_attempts,
            "runners": list(self.runners), "jobs_decided": self.jobs_decided,
            "next_local": self.next_local,
            "jobs": [[k, e.to_state()] for k, e in self.jobs.items()],
            "ended": [[e.key, e.phase.value, e.attempts, e.reason] for e in self.ended],
            "cancels": list(self.cancels), "counts": dict(self.counts),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> JobTable:
        table = cls()
        table.instance = state["instance"]
        table.settings = dict(state["settings"])
        if "runners" in table.settings:
            table.settings["runners"] = list(table.settings["runners"])
        table.max_attempts = state["max_attempts"]
        table.runners = list(state["runners"])
        table.jobs_decided = state["jobs_decided"]
        table.next_local = state["next_local"]
        for key, fields in state["jobs"]:
            table.jobs[key] = JobEntry.from_state(fields)
        table.ended = [Ended(k, JobPhase(p), a, r) for k, p, a, r in state["ended"]]
        table.cancels = list(state["cancels"])
        table.counts = dict(state["counts"])
        return table
