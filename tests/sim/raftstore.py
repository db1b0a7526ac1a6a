"""An active/active instance whose log is in a simulated Raft cluster, in the world
(``World(raft=True)``): its replicas are ``World``'s coordinators (a real
``CoordinatorCore`` and binding), whose roles are the real replica's steps
(``replication.raft_roles``) and whose claims and appends are the real store's
(``logstore.raft_tenure``), each taken as one step of the world's, so that anything can
come between two: another entry landing, a crash, a pause.

What is simulated is the cluster: one ordered log of committed entries (the real entry
encodings, read through the real ``InstanceView``), entries in flight that land in any
order the scheduler picks (one sent later may land first: a client that retried after
losing the leader), and a clock that moves only when the primary is gone (paused, or its
process ended), by more than a lease, so that a standby's real claim rule finds it
silent. A primary whose process ended is seen at once (its watch closes); a paused one
only once the lease ran out, and on resuming it heartbeats, renewing or finding itself
fenced. A fenced primary stops in one line and starts again as a standby (the world's
restart).

Checked at the end of every run, besides the world's checks (every call once and in
order, followers equal to their primary, a state equal to a replay of the log the cluster
holds): the records every reader takes have sequence ids 0, 1, 2, ... with none twice or
skipped; no entry of an epoch was sent after a newer claim had landed (a fenced primary
writes nothing once superseded); every append that returned (whose records a primary then
acknowledged) is one every reader takes; each checkpoint in the cluster is numbered by
the sequence id its state starts at.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, cast

import attrs
import xxhash
from ambrosia_ic import recovery
from ambrosia_ic.coordinator.commit_plan import Move
from ambrosia_ic.coordinator.group_commit import TakenRecord
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.coordinator.sink import FencedSink, LogSink
from ambrosia_ic.errors import LockLostError, LogCorruptionError
from ambrosia_ic.logstore import CheckpointFile, DiskRecord, checkpoint_path, write_checkpoint
from ambrosia_ic.logstore.raft_entries import (
    CheckpointEnd,
    EpochClaimed,
    Event,
    Heartbeat,
    InstanceView,
    Records,
    decode_store_entry,
    encode_checkpoint_end,
    encode_checkpoint_part,
    encode_heartbeat,
    encode_records,
    part_body,
)
from ambrosia_ic.logstore.raft_rules import standby_claim
from ambrosia_ic.logstore.raft_tenure import CatchUp, Propose, RaftTenure, Steps
from ambrosia_ic.replication import raft_roles as roles

from ambrosia_core.wire import TakeCheckpoint, encode_checkpoint_record

from .disk import DiskEntry, SavedCheckpoint, SimDisk
from .world import MAX_RECORD, Node, Scenario, Step, World

__all__ = ["RaftReplicaNode", "RaftStore", "scenario"]

LEASE = 1.0
EVERY = 3  # records between the checkpointing secondary's checkpoints
LAND = 3  # which of the entries in flight may land next: one of the first three sent
Sub = Generator[bytes | None, None, Any]  # a step's moves: None, or a request id awaited


@attrs.define
class Entry:
    index: int
    reqid: bytes
    data: bytes
    landed: int  # the cluster's count of sends and landings when it landed


class RaftDisk(SimDisk):
    """The instance's directory, which holds nothing of its log: a replay reads the
    cluster's."""

    def __init__(self, root: Path, name: str, store: RaftStore) -> None:
        super().__init__(root, name)
        self.store = store

    def replay_from(self) -> tuple[SavedCheckpoint, list[DiskEntry]] | None:
        return self.store.replay_from()


class RaftStore:
    """The cluster holding instance ``name``'s log, and the steps it adds to the world:
    a replica's next step (``raft``), an entry landing (``land``), time passing while the
    primary is gone (``lapse``), a paused primary (``pause``)."""

    def __init__(self, world: World, name: str = "i0") -> None:
        self.w = world
        self.name = name
        world.disks[name] = RaftDisk(world.root, f"{name}-raft", self)
        self.now = 0.0  # the cluster's clock (seconds)
        self.ticks = 0  # sends and landings so far: the order they came in
        self.log: list[Entry] = []
        self.flight: list[tuple[bytes, bytes]] = []  # (request id, data), in the order sent
        self.done: dict[bytes, int] = {}  # request id: its log index
        # (sent at, epoch, by): the entries sent in an epoch held (not claims)
        self.sent: list[tuple[int, int, str]] = []
        self.counted: list[tuple[int, str]] = []  # (index, by): appends that returned
        self.fenced: set[int] = set()  # replicas fenced off, not primary again yet
        self._saved: dict[int, SavedCheckpoint] = {}  # per checkpoint end's index
        self.processes = 0  # replica processes started (each has a directory of its own)
        # What every reader takes of the log, folded as entries land: the records, the
        # entries that count, and when each epoch's claim landed.
        self.view = InstanceView(name)
        self.records: list[bytes] = []
        self.taken: set[int] = set()
        self.claims: dict[int, int] = {}
        self.cluster_dir = world.root / f"{name}-raft" / "cluster"
        self.cluster_dir.mkdir()

    # -- the cluster
    def send(self, data: bytes) -> bytes:
        self.ticks += 1
        reqid = self.ticks.to_bytes(12, "big")
        self.flight.append((reqid, data))
        return reqid

    def land(self, k: int) -> None:
        reqid, data = self.flight.pop(k)
        self.ticks += 1
        index = len(self.log) + 1
        self.log.append(Entry(index, reqid, data, self.ticks))
        self.done[reqid] = index
        for ev in self.view.apply(index, reqid, data):
            if isinstance(ev, Records):
                self.records += ev.records
                self.taken.add(index)
            elif isinstance(ev, Heartbeat):
                self.taken.add(index)
            elif isinstance(ev, EpochClaimed):
                self.claims[ev.epoch] = self.ticks

    # -- who serves the instance
    def nodes(self) -> list[RaftReplicaNode]:
        return [n for k in self.w.members(self.name)
                if isinstance(n := self.w.nodes[k], RaftReplicaNode)]

    def holder(self) -> Node | None:
        """The process holding the newest epoch it knows of, if that is the newest claimed."""
        epoch = self.view.epoch
        for node in self.nodes():
            if epoch and node.tenure.held == epoch:
                return node
        return None

    def claimant(self, holder: dict[str, Any]) -> RaftReplicaNode | None:
        """The process whose claim says ``holder``, if it still runs."""
        for node in self.nodes():
            if node.process == holder.get("process"):
                return node
        return None

    def ended(self, epoch: int, holder: dict[str, Any]) -> bool:
        """The process that claimed ``epoch`` (``holder``) is gone: a standby's watch of
        it closed."""
        return epoch > 0 and self.claimant(holder) is None

    def node(self, name: str) -> Node:
        """A standalone instance's coordinator, as the world makes it."""
        return Node(self.w, name)

    def replica(self, node_id: str) -> RaftReplicaNode:
        return RaftReplicaNode(self.w, self.name, node_id, self)

    # -- the world's steps
    def steps(self, faults: bool) -> list[Step]:
        out: list[Step] = []
        for node in self.nodes():
            if node.paused:
                continue
            out += [("raft", node.id, which) for which in node.ready()]
            if faults and node.core.phase is Phase.LIVE:
                out.append(("pause", node.id))
        out += [("land", self.name, k) for k in range(min(LAND, len(self.flight)))]
        holder = self.claimant(self.view.holder)
        if (self.view.epoch and (holder is None or holder.paused)
                and any(n.waiting() and n.tenure.silent_for() <= LEASE for n in self.nodes())):
            out.append(("lapse", self.name))
        return out

    def do(self, step: Step) -> bool:
        kind = step[0]
        if kind == "raft":
            node = self.w.nodes[step[1]]
            assert isinstance(node, RaftReplicaNode)
            try:
                node.advance(step[2])
            except LogCorruptionError as err:
                self.w.fail(f"{node.id} refused the log: {err}")
            except LockLostError:
                self.fenced.add(node.number)  # it stops, and rejoins as a standby
                raise
            node.regulate()
        elif kind == "land" and step[1] == self.name:
            self.land(step[2])
        elif kind == "lapse" and step[1] == self.name:
            self.now += 1.2 * LEASE
            self.w.counts["raft lapse"] += 1
        else:
            return False
        return True

    # -- the checks
    def saved(self, end: CheckpointEnd) -> SavedCheckpoint:
        """Checkpoint ``end``'s state and the binding's chunks, read from its parts."""
        saved = self._saved.get(end.index)
        if saved is None:
            data = checkpoint_bytes(self.log, end)
            path = self.cluster_dir / f"{end.index}"
            path.write_bytes(data)
            cf = CheckpointFile(path)
            next_seq, inputs, outputs = recovery.read_state(cf)
            saved = self._saved[end.index] = SavedCheckpoint(next_seq, inputs, outputs,
                                                             list(cf.chunks()))
        return saved

    def replay_from(self) -> tuple[SavedCheckpoint, list[DiskEntry]] | None:
        """The oldest checkpoint the cluster holds, and every record after it."""
        ends = self.view.checkpoints
        if not ends:
            return None
        first = self.saved(ends[min(ends)])
        out = self.check_records()
        return first, [DiskEntry(r.seq_id, r.wire, r.inputs, r.epoch or 0, 0, 0)
                       for r in out if r.seq_id >= first.next_seq]

    def check_records(self) -> list[DiskRecord]:
        """The records every reader takes, which must be sequence ids 0, 1, 2, ..."""
        out = [roles.decode_record(r, 0) for r in self.records]
        seqs = [r.seq_id for r in out]
        if seqs != list(range(len(seqs))):
            self.w.fail(f"the records every reader takes of {self.name}'s log have the "
                        f"sequence ids {seqs}")
        return out

    def check_end(self) -> None:
        self.check_records()
        for at, epoch, who in self.sent:
            newer = [landed for e, landed in self.claims.items() if e > epoch and landed < at]
            if newer:
                self.w.fail(f"{who} sent an entry of epoch {epoch} after a newer claim had "
                            "landed: a fenced primary wrote on")
        for index, who in self.counted:
            if index not in self.taken:
                self.w.fail(f"{who}'s append returned entry {index}, which no reader "
                            "takes: its records were acknowledged and are lost")
        for number, end in self.view.checkpoints.items():
            if self.saved(end).next_seq != number:
                self.w.fail(f"checkpoint {number} in the cluster holds the state at "
                            f"sequence id {self.saved(end).next_seq}")


def checkpoint_bytes(log: list[Entry], end: CheckpointEnd) -> bytes:
    """``RaftLogStore.read_checkpoint`` over the simulated log: the parts, their check
    bytes verified.

    Raises:
        LogCorruptionError: the parts do not add up to the size or the check bytes.
    """
    data = b"".join(part_body(log[index - 1].data) for index in end.parts)
    if len(data) != end.size or xxhash.xxh64(data).intdigest() != end.check:
        raise LogCorruptionError("raft log", end.index,
                                 f"checkpoint {end.number}: check bytes do not match")
    return data


class RaftReplicaNode(Node):
    """One replica (``replication.raft.RaftReplica``): its roles' steps, and its
    committer's appends and heartbeats, each a sequence of moves (``Sub``) the world
    takes one at a time: a tenure step, or waiting for an entry to land."""

    def __init__(self, world: World, name: str, node_id: str, store: RaftStore) -> None:
        self.store = store
        self.number = int(node_id.split("/")[1])
        self.tenure = RaftTenure(name, lambda: store.now, LEASE)
        self.unread: list[Event] = []  # read by a claim's or an append's catch-up
        self.role = "starting"
        store.processes += 1
        self.process = f"{node_id} #{store.processes}"  # what its claims say of it
        self.dir = world.root / f"{name}-raft" / f"{node_id.replace('/', '-')}-{store.processes}"
        self.dir.mkdir(parents=True)
        self.roles = roles.RaftRoles(self.number, LEASE, EVERY)
        self.flow_steps = self.roles.run()
        self.step: roles.RoleStep | None = None  # the roles' step it takes next
        self.subs: dict[str, Sub] = {}  # "flow", "write", "beat": moves under way
        self.waits: dict[str, bytes | None] = {}  # what each awaits
        self.size = 0  # its records' bytes so far (the local copy's length)
        self.beat_due = False
        self.first: bytes | None = None  # the first start's checkpoint, before record 0
        super().__init__(world, name, node_id)

    def make_sink(self) -> LogSink:
        return FencedSink(cast(Any, self.tenure), region=0)  # its epoch: the one held

    def _start(self) -> None:
        self._next(None)

    def resume(self) -> None:
        super().resume()
        self.beat_due = True

    # -- what it can do now
    def ready(self) -> list[str]:
        out = [k for k, awaited in self.waits.items()
               if awaited is None or awaited in self.store.done]
        if "flow" not in self.subs and self.step is not None and self._can(self.step):
            out.append("flow")
        if self.beat_due and "beat" not in self.subs and self.role == "primary":
            out.append("beat")
        return out

    def waiting(self) -> bool:
        return isinstance(self.step, roles.Wait) and "flow" not in self.subs

    def _can(self, step: roles.RoleStep) -> bool:
        if isinstance(step, roles.Wait):
            view = self.tenure.view
            ended = self.store.ended(view.epoch, view.holder)
            return (len(self.store.log) > view.last_index or bool(self.unread)
                    or standby_claim(view.epoch, self.tenure.silent_for(), LEASE,
                                     ended=ended) is not None)
        if isinstance(step, roles.Checkpoint):
            return self.asked is None
        return True

    def advance(self, which: str) -> None:
        if which == "beat" and "beat" not in self.subs:
            self.beat_due = False
            self._begin("beat", self._append(lambda e: encode_heartbeat(self.name, e)))
        elif which == "flow" and "flow" not in self.subs:
            assert self.step is not None
            self._take(self.step)
        else:
            self._move(which)

    def _begin(self, which: str, sub: Sub) -> None:
        self.subs[which] = sub
        self._move(which)

    def _move(self, which: str) -> None:
        """The next move of ``which``; at its end, what it returned goes on."""
        sub = self.subs[which]
        try:
            self.waits[which] = next(sub)
        except StopIteration as done:
            del self.subs[which]
            self.waits.pop(which, None)
            if which == "flow":
                self._next(done.value)

    # -- the roles' steps
    def _next(self, answer: Any) -> None:
        try:
            self.step = self.flow_steps.send(answer)
        except StopIteration:
            self.step = None

    def _take(self, step: roles.RoleStep) -> None:
        """Take one of the roles' steps (``RaftReplica._step``)."""
        if isinstance(step, roles.Look):
            self._next(self._look())
        elif isinstance(step, roles.Claim):
            self._begin("flow", self._claim(step))
        elif isinstance(step, roles.FirstStart):
            self.role = "primary"
            self.world.counts["raft first start"] += 1
            self._first_start()
            self._next(None)
        elif isinstance(step, roles.Standby):
            self.role = "standby"
            self.core.set_phase(Phase.FOLLOWING)
            self._next(None)
        elif isinstance(step, roles.LoadCheckpoint):
            self._next(self._load(step.end))
        elif isinstance(step, roles.Deliver):
            for r in step.records:
                self.deliver(r.wire)
                self.core.followed(r.seq_id, r.inputs)
            self.core.caught_up()
            self._next(None)
        elif isinstance(step, roles.Checkpoint):
            self.asked = step.n  # saved once the binding sent it (``_save_switch``)
            self.core.ask_checkpoint(step.n, TakeCheckpoint())
            self.run_actions()
        elif isinstance(step, roles.TakingOver):
            self.role = "primary"
            self._next(None)
        elif isinstance(step, roles.OpenLog):
            self.tenure.check()  # ``RaftSink.next_log``
            self.log_n += 1
            self._next(None)
        elif isinstance(step, roles.GoLive):
            self.core.become_primary()
            self.run_actions()
            self.world.counts["raft takeover"] += 1
            self._go_live()
            self._next(None)
        else:  # Wait: news came, or the lease ran out
            self._next(None)

    def _look(self) -> roles.Looked:
        self._read()
        recs = tuple(roles.decode_record(r, ev.index) for ev in self.unread
                     if isinstance(ev, Records) for r in ev.records)
        self.unread = []
        view = self.tenure.view
        silent = self.tenure.silent_for()
        ended = self.role == "standby" and self.store.ended(view.epoch, view.holder)
        return roles.Looked(view.epoch, view.holder.get("replica"), view.record_count,
                            view.newest_checkpoint(), recs, silent, ended)

    def _claim(self, step: roles.Claim) -> Sub:
        holder = {"replica": self.number, "process": self.process}
        won = yield from self._tenure(self.tenure.claim(holder, after=step.after,
                                                        if_silent=step.if_silent))
        self.world.counts["raft claimed" if won else "raft claim lost"] += 1
        if won and self.number in self.store.fenced:
            self.store.fenced.discard(self.number)
            self.world.counts["raft rejoined"] += 1  # fenced, a standby, primary again
        return won

    def _load(self, end: CheckpointEnd) -> int:
        """``RaftReplica._load``: the checkpoint's bytes as a file, read by the reader."""
        path = checkpoint_path(self.dir, max(1, end.number))
        path.write_bytes(checkpoint_bytes(self.store.log, end))
        cf = CheckpointFile(path)
        next_seq, inputs, outputs = recovery.read_state(cf)
        self.core.checkpoint_loaded(next_seq, inputs, outputs)
        self.run_actions()
        self.deliver(encode_checkpoint_record(self.core.cid, cf.size) + b"".join(cf.chunks()))
        self.log_n = max(1, end.number)
        self.world.counts["raft loaded"] += 1
        return next_seq

    def _save_switch(self, position: tuple[int, dict[str, int]]) -> None:
        """The checkpointing secondary's checkpoint came: saved, then sent."""
        assert self.asked is not None
        n, self.asked = self.asked, None
        data = self._checkpoint_file(n, position, self.received.pop(n))
        self._begin("flow", self._checkpoint(n, data))

    def _checkpoint(self, n: int, data: bytes) -> Sub:
        yield from self._write_checkpoint(n, data)
        self.world.counts["raft checkpoint"] += 1

    def _checkpoint_file(self, n: int, position: tuple[int, dict[str, int]],
                         got: Any) -> bytes:
        """``checkpoints.save``: the file's bytes, as the shell sends them."""
        message, chunks, outputs = got
        next_seq, inputs = position
        state = recovery.coordinator_state(next_seq, inputs, outputs)
        return write_checkpoint(self.dir, n, state, message, chunks).read_bytes()

    # -- the first start (``RaftSink``: checkpoint 0 goes before record 0)
    def _advance_start(self) -> None:
        if self.flow != "first" or self.initial is None or 1 not in self.received:
            return
        self.first = self._checkpoint_file(1, (0, {}), self.received.pop(1))
        self.core.first_record(self.initial)
        self.flow = "first, writing"
        self._begin("write", self._write(self.core.take(MAX_RECORD, self.sink.epoch)))

    # -- the committer
    def next_move(self) -> Move:
        if "write" in self.subs:
            return Move.IDLE
        return super().next_move()

    def commit(self) -> None:
        if self.next_move() is Move.SWITCH:
            self._switch()
        else:
            self._begin("write", self._write(self.core.take(MAX_RECORD, self.sink.epoch)))

    def _switch(self) -> None:
        """``RaftSink.next_log``: a new local copy, no checkpoint."""
        self.tenure.check()
        self.log_n += 1
        self.core.switch_log(self.log_n, self.sink.checkpoints_on_switch)
        self.run_actions()

    def _write(self, record: TakenRecord) -> Sub:
        """``RaftSink.write``: the record appended (fenced), then durable."""
        if self.first is not None:
            data, self.first = self.first, None
            yield from self._write_checkpoint(0, data)
        yield from self._append(lambda e: encode_records(self.name, e, [record.disk]))
        self.world.wrote(self.tenure.held, self)
        self.size += len(record.disk)
        self.core.durable(record, self.size)
        self.run_actions()
        if self.flow:  # record 0: the first start goes live
            self._go_live()

    def _append(self, encode: Callable[[int], bytes]) -> Sub:
        index = yield from self._tenure(self.tenure.append(encode))
        self.store.counted.append((index, self.id))
        self.unread = []  # the primary's own: delivered already
        return index

    def _write_checkpoint(self, n: int, data: bytes) -> Sub:
        """``RaftLogStore.write_checkpoint``: one part, then its end, in the epoch its
        view knows (unfenced: a checkpoint of an older epoch is one nobody reads)."""
        self._read()
        epoch = self.tenure.view.epoch
        reqid = self.store.send(encode_checkpoint_part(self.name, epoch, n, 0, data))
        while reqid not in self.store.done:
            yield reqid
        reqid = self.store.send(encode_checkpoint_end(
            self.name, epoch, n, 1, len(data), xxhash.xxh64(data).intdigest()))
        while reqid not in self.store.done:
            yield reqid
        self._read()

    # -- the store's steps over the cluster
    def _tenure(self, steps: Steps) -> Sub:
        """Take ``raft_tenure``'s steps: what they return. Every step is a move of its
        own, so that anything may come between two."""
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                return done.value
            answer = None
            if isinstance(step, CatchUp):
                self._read()
            elif isinstance(step, Propose):
                kind = decode_store_entry(step.data, 0)
                if kind is not None and kind[0] != "E":  # an entry of the epoch held
                    assert self.tenure.held is not None
                    self.store.sent.append((self.store.ticks + 1, self.tenure.held, self.id))
                reqid = self.store.send(step.data)
                while reqid not in self.store.done:
                    yield reqid
                answer = (reqid, self.store.done[reqid])
            else:
                self.world.counts["raft renewed"] += 1
            yield None

    def _read(self) -> None:
        """Catch up: every committed entry into the view (answered at once)."""
        view = self.tenure.view
        events = [ev for e in self.store.log[view.last_index:]
                  for ev in view.apply(e.index, e.reqid, e.data)]
        self.unread += events
        self.tenure.read(self.store.now, events)



def scenario(seed: int) -> Scenario:
    """Seed ``seed``'s run of the world with its replicas' log in a simulated Raft cluster
    (two or three replicas; the other parameters as ``Scenario.of`` draws them)."""
    rng = random.Random(seed ^ 0x2AF7)
    return attrs.evolve(Scenario.of(seed), replicas=rng.choice([2, 3]), secondary=False,
                        fault_steps=rng.randrange(60, 240),
                        raft=False, raft_store=True)
