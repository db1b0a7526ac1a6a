"""A simulated Raft cluster under the real Raft store's rules: one ordered log of
committed entries (the real entry encodings, read through the real ``InstanceView``),
appends that commit after a delay (now and then one much later), a leader lost (appends
and reads wait longer than a lease, then go on), and replicas of one instance whose
claims and appends are the real store's steps (``logstore.raft_tenure``, on the rules of
``logstore.raft_rules``): a primary's append is separate steps (look when the rules say
so, renew, send, read up to it), with a pause possible after any of them, so a primary
paused between them would send after a newer claim if the rules let it.

Checked on every run: the replicas never held one epoch twice, **no entry of a primary's
epoch was sent after a newer claim had been committed** (an entry that readers must ignore
is a failure, not a tolerance), and every append that returned (whose records a primary
then acknowledges) is an entry every reader takes; a fenced primary rejoins as a standby.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ambrosia_ic.errors import LockLostError
from ambrosia_ic.logstore import raft_rules
from ambrosia_ic.logstore.raft_entries import (
    EpochClaimed,
    Heartbeat,
    InstanceView,
    Records,
    decode_store_entry,
    encode_heartbeat,
    encode_records,
)
from ambrosia_ic.logstore.raft_tenure import CatchUp, Propose, RaftTenure, Steps
from ambrosia_ic.replication.raft_roles import POLL

from tests.sim.world import SimFailure

__all__ = ["RaftWorld", "run_raft"]

LEASE = 1.0
NAME = "sim"


@dataclass
class Entry:
    index: int
    reqid: bytes
    data: bytes
    sent: float
    committed: float
    by: int


@dataclass
class Cluster:
    """The committed log and the appends in flight; ``stall`` says until when a lost
    leader holds up every append and read, and now and then an entry takes long to
    land."""

    rng: random.Random
    log: list[Entry] = field(default_factory=list)
    flight: list[tuple[float, int, bytes, bytes, float, int]] = field(default_factory=list)
    stall_until: float = 0.0
    done: dict[bytes, int] = field(default_factory=dict)  # request id: its log index
    _n: int = 0

    slow: int = 0  # how many entries took the long way

    def send(self, now: float, data: bytes, by: int) -> bytes:
        self._n += 1
        reqid = self._n.to_bytes(12, "big")
        at = max(now, self.stall_until) + self.rng.uniform(0.002, 0.02)
        if self.rng.random() < 0.02:
            # Sent the long way: the writer's client retried it after losing the
            # leader, or it sat in a queue; it may land after a claim sent later.
            self.slow += 1
            at += self.rng.uniform(0.5, 2.0) * LEASE
        heapq.heappush(self.flight, (at, self._n, reqid, data, now, by))
        return reqid

    def commit(self, now: float) -> None:
        while self.flight and self.flight[0][0] <= now:
            at, _, reqid, data, sent, by = heapq.heappop(self.flight)
            self.log.append(Entry(len(self.log) + 1, reqid, data, sent, at, by))
            self.done[reqid] = len(self.log)

    def answered(self, now: float) -> float:
        """When a read asked at ``now`` is answered."""
        return max(now, self.stall_until) + self.rng.uniform(0.001, 0.01)


class Replica:
    """One replica: a standby following the log and claiming when the rules allow, a
    primary heartbeating and appending records; its claims and appends are the real
    store's steps (``RaftTenure``), each taken as the simulated cluster takes it, with a
    pause possible after any of them."""

    def __init__(self, world: RaftWorld, number: int) -> None:
        self.w = world
        self.number = number
        self.t = RaftTenure(NAME, lambda: world.now, LEASE)
        self.role = "standby"
        self.was_fenced = False

    def read(self) -> Iterator[float]:
        """Catch up: the answer comes after a delay (longer in a stall)."""
        asked = self.w.now
        answered = self.w.cluster.answered(asked)
        yield answered - asked
        self.w.cluster.commit(answered)
        view = self.t.view
        events = [ev for e in self.w.cluster.log[view.last_index:]
                  for ev in view.apply(e.index, e.reqid, e.data)]
        self.t.read(asked, events)

    def run_steps(self, steps: Steps) -> Iterator[float]:
        """Take the store's steps over the simulated cluster; what they return. A primary
        may be paused after any of them."""
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                return done.value
            answer = None
            if isinstance(step, CatchUp):
                yield from self.read()
                assert step.until is None or self.t.view.last_index >= step.until
            elif isinstance(step, Propose):
                kind = decode_store_entry(step.data, 0)
                if kind is not None and kind[0] != "E":  # an entry of the epoch held
                    self.w.sent.append((self.w.now, self.t.held, self.number))
                    self.w.note(f"replica {self.number} sends an entry of epoch {self.t.held}")
                reqid = self.w.cluster.send(self.w.now, step.data, self.number)
                while reqid not in self.w.cluster.done:
                    yield 0.005
                    self.w.cluster.commit(self.w.now)
                answer = (reqid, self.w.cluster.done[reqid])
            else:
                self.w.counts["renewed"] += 1
            # The store awaited the cluster: a pause may come before it goes on (between
            # a step's decision and its send no await gives it the chance).
            yield from self.w.maybe_pause(self)

    def append(self, encode: Callable[[int], bytes]) -> Iterator[float]:
        try:
            index = yield from self.run_steps(self.t.append(encode))
        except LockLostError:
            self.fence()
            return
        self.w.counted.append((index, self.number))  # the primary acknowledges it now
        self.w.counts["appended"] += 1

    def fence(self) -> None:
        self.w.counts["fenced"] += 1
        self.w.note(f"replica {self.number} fenced by epoch {self.t.view.epoch}")
        # It rejoins as a standby by itself: a new process, reading the log afresh.
        self.t = RaftTenure(NAME, lambda: self.w.now, LEASE)
        self.role = "standby"
        self.was_fenced = True

    def claim(self, after: int, if_silent: bool) -> Generator[float, None, bool]:
        self.w.note(f"replica {self.number} may claim epoch {self.t.view.epoch + 1}")
        if not (yield from self.run_steps(self.t.claim({"replica": self.number}, after=after,
                                                       if_silent=if_silent))):
            return False
        self.role = "primary"
        self.w.counts["claimed"] += 1
        if self.was_fenced:  # a fenced primary that followed as a standby, primary again
            self.w.counts["rejoined"] += 1
            self.was_fenced = False
        return True

    def run(self) -> Iterator[float]:
        while self.w.now < self.w.until:
            if self.role == "primary":
                yield LEASE / 5 * self.w.rng.uniform(0.5, 1.0)
                yield from self.w.maybe_pause(self)
                if self.role != "primary":
                    continue
                if self.w.rng.random() < 0.01:
                    yield from self.crash()
                    continue
                if self.w.rng.random() < 0.5:
                    yield from self.append(lambda e: encode_heartbeat(NAME, e))
                else:
                    yield from self.append(lambda e: encode_records(NAME, e, [b"r"]))
            else:  # as a Raft replica's standby follows the log
                yield from self.read()
                silent = self.t.silent_for()
                move = raft_rules.standby_claim(self.t.view.epoch, silent, LEASE)
                if move is None or not (yield from self.claim(*move)):
                    yield raft_rules.standby_wait(silent, LEASE, POLL)

    def crash(self) -> Iterator[float]:
        """The primary's process dies (its entries in flight still commit) and starts
        again as a standby with nothing but the log."""
        self.w.counts["crash"] += 1
        self.w.note(f"replica {self.number} crashes")
        yield self.w.rng.uniform(0.1, 3.0) * LEASE
        self.t = RaftTenure(NAME, lambda: self.w.now, LEASE)
        self.role = "standby"


class RaftWorld:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cluster = Cluster(random.Random(seed ^ 0x5A5A))
        self.now = 0.0
        self.until = 12.0
        self.sent: list[tuple[float, int, int]] = []  # (sent, epoch, replica)
        self.counted: list[tuple[int, int]] = []  # (index, replica): appends that returned
        self.counts: dict[str, int] = {k: 0 for k in ("appended", "fenced", "claimed", "renewed",
                                                       "pause", "stall", "crash",
                                                       "rejoined")}
        self.trace: list[str] = []
        self.replicas = [Replica(self, k) for k in range(self.rng.choice((2, 3)))]
        if self.rng.random() < 0.5:
            start = self.rng.uniform(1, 8)
            self.cluster.stall_until = 0.0
            self._stall = (start, start + self.rng.uniform(0.3, 2.5) * LEASE)
        else:
            self._stall = None

    def note(self, what: str) -> None:
        self.trace.append(f"{self.now:7.3f} {what}")

    def maybe_pause(self, r: Replica) -> Iterator[float]:
        if r.role == "primary" and self.rng.random() < 0.04:
            self.counts["pause"] += 1
            pause = self.rng.uniform(0.1, 3.0) * LEASE
            self.note(f"replica {r.number} paused {pause:.3f} s")
            yield pause

    def run(self) -> RaftWorld:
        queue: list[tuple[float, int, Iterator[float]]] = []
        for k, r in enumerate(self.replicas):
            queue.append((self.rng.uniform(0, 0.1), k, r.run()))
        heapq.heapify(queue)
        while queue:
            at, k, gen = heapq.heappop(queue)
            self.now = at
            if self._stall and self._stall[0] <= at:
                self.cluster.stall_until, self._stall = self._stall[1], None
                self.counts["stall"] += 1
                self.note(f"the leader is lost until {self.cluster.stall_until:.3f}")
            self.cluster.commit(at)
            try:
                step = next(gen)
            except StopIteration:
                continue
            heapq.heappush(queue, (at + step, k, gen))
        self.cluster.commit(float("inf"))
        self.counts["slow send"] = self.cluster.slow
        self.check()
        return self

    def check(self) -> None:
        claims: dict[int, float] = {}
        view = InstanceView(NAME)
        read: set[int] = set()  # the entries every reader takes
        for e in self.cluster.log:
            for ev in view.apply(e.index, e.reqid, e.data):
                if isinstance(ev, EpochClaimed):
                    claims[ev.epoch] = e.committed
                if isinstance(ev, (Records, Heartbeat)):
                    read.add(ev.index)
        for index, who in self.counted:
            if index not in read:
                raise SimFailure(
                    f"raft seed {self.seed}: replica {who}'s append returned entry {index}, "
                    "which no reader takes (it came after a newer claim): its records "
                    "were acknowledged and are lost; the run's last steps:\n"
                    + "\n".join(self.trace[-12:]), [])
        for sent, epoch, who in self.sent:
            newer = [at for ep, at in claims.items() if ep > epoch and at <= sent]
            if newer:
                raise SimFailure(
                    f"raft seed {self.seed}: replica {who} sent an entry of epoch {epoch} at "
                    f"{sent:.3f}, after a newer claim was committed at {min(newer):.3f}; the run's "
                    "last steps:\n" + "\n".join(self.trace[-12:]), [])


def run_raft(seed: int) -> dict[str, int]:
    """One simulated cluster's run (raises ``SimFailure``): what it did, counted."""
    return {f"raft {k}": n for k, n in RaftWorld(seed).run().counts.items()}
