"""A deterministic simulation of many coordinators, their bindings and the links between
them, in one process, driven by one seeded scheduler (FoundationDB's way of testing).

What runs is the real thing, in memory: each instance is a ``CoordinatorCore`` (every
decision the live coordinator makes) with the real ``StandaloneSink`` writing into a
simulated disk, and its binding is the real ``Engine`` running ``app.Rounds``. What is
simulated is only what moves bytes: the disk (``disk``: writes are lost at a crash unless
synced, or a prefix of a write in progress survives, and a log whose directory entry was
not synced is lost whole; a checkpoint is durable once saved, as by a synced rename, and
a crash while one is saved leaves its temporary file), the binding's
socket (bytes
delivered wait until the binding reads them, in pieces), and the links (a connection
per sender and destination, its bytes delivered in pieces, acknowledgements on their
way back, connections dropped, pairs of instances cut apart and healed). The shell of
each coordinator here does what ``coordinator.lifecycle``, ``startup`` and
``checkpoints`` do around the core: the same steps in the same order. The committer's
moves and back-pressure are the shell's own decisions (``commit_plan``), with small
limits so that inbound links pause often. A standalone
instance's disk is a real directory (on a memory file system where there is one): its
logs and checkpoints are written as the coordinator writes them, and its start-up reads
them with the real recovery reader (``recovery.first_start_pending``, ``plan_recovery``,
``replay_wire``), so what a recovery makes of a torn write, a flipped bit, a log removed
or a temporary file left behind is the coordinator's own decision. Once a new checkpoint
is durable (and before the shell goes on: the core hears the checkpoint saved, or the
recovery goes live), the coordinator prunes as the real shell does, in a step of its
own: the real sink's ``remove_unkept`` on the real directory, keeping the newest
``keep`` checkpoints (1, 2 or 3, drawn per scenario) not known damaged, then the
temporary files of checkpoints through the newest; a crash can come before it, or
during it, before its directory sync (``SimDisk.prune``: the removals not yet on disk
come back). A checkpoint the recovery passed over as damaged stays damaged until that
pruning is done, so what pruning counts as kept is seen. Two parts live in
their own modules: an active/active instance's checkpointing secondary (``secondary``),
and the standalone instances' registrations and live upgrades (``upgrade``), which
``World`` runs through its ``extras`` (their steps, and their checks at the end).

A run is a list of steps. ``World.run`` draws them from a seed (faults first, then
the world heals and runs until nothing is left to do); ``World.replay`` runs a given
list, skipping steps that cannot happen. After every step the invariants are checked
(``check_now``), and at the end the outcome (``check_end``):

- every call is applied exactly once and in order (each ping of each round once, no
  gap); every awaited result arrives, in order; no log switch stays wanted;
- no link is read while back-pressure's limits are passed (so the inputs waiting pass
  ``PENDING_LIMIT`` by at most what one read brings);
- a recovered instance's state, as it goes live, equals a replay of its durable log
  by a fresh binding from the oldest checkpoint kept (the oldest that has every log
  after it); so does every instance's at the end;
- after every start, each of the newest ``keep`` checkpoints has every log after it
  (what a repro from it reads), and after every pruning each checkpoint left has, and
  as many intact checkpoints stay as ``keep`` asks (all there were, if fewer: a
  checkpoint known damaged is not counted); a refused start removes nothing;
- damage (a flipped bit in a log or a checkpoint, a log removed) is refused in one line
  naming the file, with nothing in the directory changed, or repaired from what is
  intact; a recovery never rolls back past a record that was durable, never reads a
  damaged file as valid, never starts afresh an instance that went live, and leaves no
  temporary checkpoint behind; no crash takes a log that held synced records with its
  directory entry.

``shrink`` cuts a failing run down to a shortest list of steps that still fails.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import tempfile
import weakref
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

import attrs
from ambrosia_ic import logstore, recovery
from ambrosia_ic.coordinator import commit_plan, start_plan
from ambrosia_ic.coordinator.ack_batch import AckBatch
from ambrosia_ic.coordinator.commit_plan import Links, Move
from ambrosia_ic.coordinator.core import (
    CheckpointData,
    CheckpointReceived,
    CoordinatorCore,
    Deliver,
    Durable,
    InitialReceived,
    LogLine,
)
from ambrosia_ic.coordinator.group_commit import TakenRecord
from ambrosia_ic.coordinator.inbound import (
    Ask,
    Close,
    InboundAction,
    InboundLink,
    Log,
    Records,
    Send,
)
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.coordinator.sink import FencedSink, LogSink
from ambrosia_ic.errors import (
    LockLostError,
    LogCorruptionError,
    MissingLogError,
    VersionSupersededError,
)
from ambrosia_ic.links import handshake
from ambrosia_ic.logstore import (
    LogWriter,
    checkpoint_path,
    log_path,
    remove_first_start_leftovers,
)
from ambrosia_ic.recovery import RecoveryPlan
from ambrosia_ic.replication import shared_dir, takeover, upgrade_steps

from ambrosia_core.errors import CoordinatorError, RemoteProtocolError
from ambrosia_core.wire import (
    InitialMessage,
    TakeBecomingPrimaryCheckpoint,
    encode_checkpoint_record,
)
from ambrosia_py.runtime.engine import Engine, SendCheckpoint

from .app import Rounds
from .disk import DiskEntry, SavedCheckpoint, SimDisk, SimEpochs, SimLog, SimSink
from .replay import Replays

__all__ = ["Scenario", "Seeded", "SimFailure", "Step", "World", "explain", "explain_seed", "shrink"]

MAX_RECORD = 1 << 20
# Back-pressure's limits, small so that it happens often: more inputs waiting for the
# log than PENDING_LIMIT, or more unread bytes at the binding than BUFFER_LIMIT, pause a
# coordinator's inbound links; a drain ends once the binding's bytes are down to
# BUFFER_LOW (asyncio's low-water mark is a quarter of the high).
PENDING_LIMIT = 2
BUFFER_LIMIT = 160
BUFFER_LOW = BUFFER_LIMIT // 4
_FAULTS = frozenset({"crash", "drop", "cut", "heal", "pause", "flip", "lose",
                     "register-upgrade", "flip-registration", "aa-crash"})
_REGULATED = frozenset({"bind", "commit", "written", "link", "follow", "claim", "take-over",
                        "restart", "resume", "beat", "prune"})
# Where a flipped bit lands in a log record (byte, bit; a negative byte counts from the
# record's end): its committer id, its length by one and by 65,536 (it then runs past the
# end of the file), its sequence id, body, watermarks and own check bytes.
_SPOTS = ((1, 3), (4, 0), (6, 0), (16, 1), (26, 2), (-20, 4), (-1, 6))
# Where the simulated disks' directories go: memory, where the machine has it.
_DISK_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else None
Step = tuple[Any, ...]  # ("action", *arguments)
AA_UPGRADES = 0.4  # of the seeds whose replica set has no checkpointing secondary


# The disk is ``disk``: SimLog, SimDisk, SimSink, SimEpochs.
class Refused(Exception):  # noqa: N818 (a start refused, as the coordinator's line)
    """A coordinator refused to start: its recovery found damage it cannot repair."""


class SimFailure(AssertionError):  # noqa: N818 (an assertion, as pytest shows it)
    """An invariant broke; ``trace`` is the run's steps up to the failure."""

    def __init__(self, message: str, trace: list[Step]) -> None:
        super().__init__(message)
        self.trace = trace


# ---------------------------------------------------------------------- links
@attrs.define
class Conn:
    """One link connection from a sender to a destination, while it is up: from the
    coordinator ``frm`` to the coordinator ``to`` (replicas: the primaries then)."""

    frm: str
    to: str
    inbound: InboundLink  # the receiver's rules for this connection (the link server's)
    wire: bytes = b""
    acks: list[int] = attrs.field(factory=list)


# ---------------------------------------------------------------------- a coordinator
class Node:
    """One instance's coordinator (the core, the shell's steps) and its binding."""

    def __init__(self, world: World, name: str, node_id: str | None = None) -> None:
        self.world = world
        self.name = name  # the instance's
        self.id = node_id or name  # this coordinator's (a replica's: "name/r")
        self.disk = world.disks[name]
        self.sink: LogSink = self.make_sink()  # a real one, writing SimLogs
        self.core = CoordinatorCore(name, world.cid[name], trigger_bytes=world.trigger,
                                    keeps_early_impulses=self.sink.keeps_early_impulses)
        self.paused = False
        self.acks = AckBatch()  # what its link server acknowledges next
        self.links_paused = False  # back-pressure: its inbound links are not read
        self.draining = False  # back-pressure awaits the binding's reading
        self.engine = world.new_engine(name)
        self.inbox = bytearray()  # delivered to the binding, not yet read
        self.writer: SimLog | None = None
        self.log_n = 0
        self.lines: list[str] = []
        self.initial: InitialMessage | None = None
        self.received: dict[int, CheckpointData] = {}
        self.flow = ""  # the start-up step waited for: "first", "recover", "" once live
        self.asked: int | None = None  # the checkpoint a switch asked for
        self.recovered = False
        self.writing: TakenRecord | None = None  # taken; its write and sync in progress
        self.plan: RecoveryPlan | None = None  # what its recovery read
        self.damaged: set[int] = set()  # checkpoints known damaged (``c.damaged``)
        # The pruning owed once a new checkpoint is durable, and what comes after it:
        # "switch" (``checkpoints._finish``), "recover" (``startup._recover``) or
        # "secondary" (``shared_dir._checkpoint``); "" when none is.
        self.pruning = ""
        self._start()

    def make_sink(self) -> LogSink:
        return SimSink(self)

    # -- start-up (``startup``)
    def _start(self) -> None:
        """The coordinator's own decision (``start_plan.choose_start``) on the real
        files: a first start, or a recovery through the real reader with a torn tail cut
        off; damage it cannot repair, or a history gone, refuses the start."""
        try:
            chosen = start_plan.choose_start(self.disk.dir, self.core.cid, name=self.name,
                                             started=self.name in self.world.started)
        except (LogCorruptionError, CoordinatorError) as err:
            raise Refused(err) from None
        self.lines += chosen.lines
        self.damaged = set(chosen.damaged)
        if chosen.cut is not None:
            path, offset = chosen.cut
            LogWriter(path, truncate_at=offset).close()
        # ``startup.start``: once the flow is chosen, under the directory's lock, what a
        # killed checkpoint write left is removed.
        for name, _ in logstore.remove_checkpoint_temps(self.disk.dir):
            self.lines.append(f"removed {name}, left by a checkpoint write cut short")
        if chosen.plan is None:
            self._first_start()
        else:
            self._recover(chosen.plan)

    def _first_start(self) -> None:
        if self.name in self.world.started:
            self.world.fail(f"{self.id} started afresh, but {self.name} had gone live (a "
                            "silent first start)")
        remove_first_start_leftovers(self.disk.dir)  # an interrupted first start's
        self.disk.logs.clear()
        self.disk.checkpoints.clear()
        self.core.begin_first_start()
        self.run_actions()
        self.flow = "first"

    def _recover(self, plan: RecoveryPlan) -> None:
        """``startup._recover``: the checkpoint, then the records the plan found."""
        core = self.core
        self.plan = plan
        durable = self.disk.durable_end()
        if plan.next_seq != durable:
            self.world.fail(f"{self.id} recovers up to record {plan.next_seq - 1}, but "
                            f"record {durable - 1} was durable"
                            + (" (a silent rollback)" if plan.next_seq < durable else ""))
        core.begin_recovery(plan.start_seq, plan.next_seq, plan.inputs, plan.outputs)
        self.deliver(encode_checkpoint_record(core.cid, plan.checkpoint.size)
                     + b"".join(plan.checkpoint.chunks()))
        for wire, last in recovery.replay_wire(plan):
            self.deliver(bytes(wire))
            core.replayed(last)
        self.log_n = plan.last_log + 1
        self._ask_to_go_live()
        self.run_actions()

    def _ask_to_go_live(self) -> None:
        """The recovery's last step: the checkpoint that starts its new log."""
        self.core.ask_checkpoint(self.log_n, TakeBecomingPrimaryCheckpoint())
        self.flow = "recover"

    def _advance_start(self) -> None:
        core = self.core
        if self.flow == "first" and self.initial is not None and 1 in self.received:
            message, chunks, outputs = self.received.pop(1)
            self.disk.save_checkpoint(1, SavedCheckpoint(0, {}, outputs, chunks), message)
            self.writer = self.disk.open_log(1)
            self.disk.sync_dir()  # ``startup.first_start``
            self.log_n = 1
            core.first_record(self.initial)
            self._commit_one()  # record 0, durably, before anything else
            self._go_live()
        elif self.flow == "recover" and self.log_n in self.received:
            message, chunks, outputs = self.received.pop(self.log_n)
            self.writer = cast(SimLog, self.sink.next_log(self.disk.dir, self.log_n))
            self.disk.save_checkpoint(self.log_n, SavedCheckpoint(
                core.group.next_seq, dict(core.group.inputs), outputs, chunks), message)
            self.recovered = True
            self.pruning = "recover"  # then it goes live

    def _go_live(self) -> None:
        self.world.started.add(self.name)  # ``registry.mark_started``
        self.core.set_phase(Phase.LIVE)
        self.flow = ""
        if self.recovered:
            self.world.counts["recovered"] += 1
            self.world.check_replay(self, "as it went live after a recovery")

    # -- the binding (``reading``)
    def deliver(self, data: bytes) -> None:
        self.inbox += data

    def bind(self, fraction: float) -> None:
        """The binding reads part of what was delivered and answers."""
        n = max(1, round(len(self.inbox) * fraction))
        data, self.inbox = bytes(self.inbox[:n]), self.inbox[n:]
        try:
            self.engine.receive_data(data)
            while (out := self.engine.next_output()) is not None:
                raw = b"".join(out.chunks()) if isinstance(out, SendCheckpoint) else out.data
                self.core.receive_binding(raw)
                self.run_actions()
        except RemoteProtocolError as err:  # the real binding stops with this line
            self.world.fail(f"{self.id}'s binding refused what its coordinator delivered: "
                            f"{err}")
        if self.draining and len(self.inbox) <= BUFFER_LOW:
            self.draining = False  # ``commit._after_drain``: the drain ended

    def regulate(self) -> None:
        """Back-pressure (``commit.regulate``), after every step of this coordinator:
        its inbound links pause while the binding's buffer is over its limit or too
        many inputs wait for the log, and resume as ``commit_plan.links`` says."""
        if self.core.phase is not Phase.LIVE:
            return
        todo = commit_plan.links(len(self.inbox) > BUFFER_LIMIT, len(self.core.group.pending),
                                 self.draining, PENDING_LIMIT)
        if todo is Links.RESUME:
            self.links_paused = False
        elif todo is not Links.HOLD:
            if not self.links_paused:
                self.world.counts["paused"] += 1
            self.links_paused = True
            if todo is Links.PAUSE_AND_DRAIN:
                self.draining = True

    def run_actions(self) -> None:
        for action in self.core.take_actions():
            if isinstance(action, Deliver):
                self.deliver(action.data)
            elif isinstance(action, Durable):
                self.deliver(action.wire)
                self.acks.add(action.acks)  # the link server's batch (``AckBatch``)
            elif isinstance(action, CheckpointReceived):
                self.received[action.n] = action.data
                if self.asked == action.n:
                    self._save_switch(action.position)
            elif isinstance(action, InitialReceived):
                self.initial = action.message
            elif isinstance(action, LogLine):
                self.lines.append(action.text)
            # OpenLink: the world dials a destination the core has an outbox for; Wake:
            # the world's scheduler looks at every committer after each step
        if self.acks.pending:
            self._send_acks()
        if self.flow:
            self._advance_start()

    def _send_acks(self) -> None:
        """The link server's batch goes out (``link_server._send_acks``): one TrimTo per
        sender, on its connection. Its ``ACK_DELAY`` is the time the ``ack`` step takes to
        come, and a batch of a step's records goes out as one."""
        for sender, position in self.acks.take().items():
            conn = self.world.conns.get((sender, self.name))
            if conn is not None and conn.to == self.id:
                conn.acks.append(position)

    # -- the committer (``commit``, ``checkpoints.switch_log``)
    def next_move(self) -> Move:
        core = self.core
        if core.phase is not Phase.LIVE or self.writing is not None:
            return Move.IDLE
        return commit_plan.next_move(len(core.group.pending), core.ckpt.switch_wanted)

    def commit(self) -> None:
        """The committer's next move (``commit_plan.next_move``): a log switch, or the
        next record taken and its write and sync begun (they end with ``written``: the
        shell's thread mode, where everything else goes on meanwhile)."""
        if self.next_move() is Move.SWITCH:
            self._switch()
        else:
            self.writing = self.core.take(MAX_RECORD, self.sink.epoch)

    def written(self) -> None:
        record, self.writing = self.writing, None
        assert record is not None
        self._write(record)

    def _commit_one(self) -> None:
        self._write(self.core.take(MAX_RECORD, self.sink.epoch))

    def _write(self, record: TakenRecord) -> None:
        assert self.writer is not None
        self.sink.write(self.writer, record.disk)  # type: ignore[arg-type]
        self._delivered(record)

    def _delivered(self, record: TakenRecord) -> None:
        """The record is durable: the core lets it go out."""
        core = self.core
        assert self.writer is not None
        core.durable(record, self.writer.size)
        self.run_actions()  # delivered, and acknowledged to its senders

    def _switch(self) -> None:
        core = self.core
        n = self.log_n + 1
        self.writer = cast(SimLog, self.sink.next_log(self.disk.dir, n, self.writer))  # type: ignore[arg-type]
        self.log_n = n
        self.asked = n
        core.switch_log(n, self.sink.checkpoints_on_switch)
        self.run_actions()  # the request

    def _save_switch(self, position: tuple[int, dict[str, int]]) -> None:
        assert self.asked is not None
        n, (next_seq, inputs) = self.asked, position
        self.asked = None
        message, chunks, outputs = self.received.pop(n)
        self.disk.save_checkpoint(n, SavedCheckpoint(next_seq, inputs, outputs, chunks),
                                  message)
        self.pruning = "switch"  # then the core hears the checkpoint is saved

    # -- pruning (``checkpoints.remove_unkept``), once the new checkpoint is durable
    def prune(self) -> None:
        self.world.prune(self)
        self.after_pruning()

    def after_pruning(self) -> None:
        """What the shell does once ``remove_unkept`` returns."""
        todo, self.pruning = self.pruning, ""
        if todo == "switch":
            self.core.checkpoint_saved()
            self.world.counts["checkpoint"] += 1
            self.run_actions()
        elif todo == "recover":
            # What its recovery passed over as damaged may be repaired now (if kept).
            self.disk.repair()
            self._go_live()

    def observed(self) -> dict[str, Any] | None:
        return _observed(self.engine)

    def resume(self) -> None:
        self.paused = False


# ---------------------------------------------------------------------- a replica
class ReplicaNode(Node):
    """One replica of an active/active instance (``replication.shared_dir.SharedDirReplica``): the
    real ``FencedSink`` over the shared directory's epochs; it follows the log until the
    primary is gone (crashed, or paused past its lease), then claims the next epoch,
    seals the newest log, delivers up to the seal and goes live."""

    def __init__(self, world: World, name: str, node_id: str) -> None:
        self.epochs = SimEpochs(world.disks[name])
        self.steps: Iterator[str] | None = None  # the fenced write of ``writing``
        self.role = "follower"
        self.tail: tuple[int, int, int] | None = None  # (log, offset, next seq id)
        self.beat_due = False  # resumed from a pause: its heartbeat has not run since
        self.taking: Generator[upgrade_steps.UpgradeStep, Any, None] | None = None
        self.version = 0  # the version its code runs
        self._taken: Any = None  # the answer to the takeover's last step
        self._polled: tuple[tuple[Any, ...], tuple[list[DiskEntry], Any]] | None = None
        super().__init__(world, name, node_id)

    def make_sink(self) -> LogSink:
        return FencedSink(cast(Any, self.epochs), region=0)

    def _start(self) -> None:
        if (self.disk.first_start_pending() and self.epochs.current() == 0
                and self.epochs.claim(1)):
            self.role = "primary"
            self._first_start()
            return
        self.core.set_phase(Phase.FOLLOWING)

    # -- following (``replica._follow``, ``LogTail.poll``)
    def _poll(self) -> tuple[list[DiskEntry], tuple[int, int, int] | None]:
        """What the next look at the log delivers, and the tail after it: a function of
        the tail, the log's synced bytes (which only grow, or are cut to what was
        synced), its seal, whether the next log exists and the newest epoch. Steps ask
        after every step, so the last answer is kept while those stay the same."""
        tail = self.tail
        if tail is None:
            return [], None
        n, offset, next_seq = tail
        logs = self.disk.logs
        log = logs.get(n)
        if log is None:
            return [], tail
        has_next = n + 1 in logs  # first: a takeover seals, then makes the next
        seal = self.disk.seals.get(n)
        key = (tail, log, log.synced, has_next, seal, self.epochs.current())
        if self._polled is not None and self._polled[0] == key:
            return self._polled[1]
        recs = [r for r in log.records() if r.offset >= offset and r.seq >= next_seq
                and (seal is None or r.end <= seal)]
        if seal is None and not has_next:
            recs = shared_dir.committed_prefix(recs, key[-1])
        if recs:
            offset, next_seq = recs[-1].end, recs[-1].seq + 1
        whole_end = log.records_end()
        done = (seal is not None and offset >= seal) or (
            seal is None and has_next and offset == whole_end)
        polled = recs, ((n + 1, 0, next_seq) if done else (n, offset, next_seq))
        self._polled = key, polled
        return polled

    def pruned_under(self) -> bool:
        """Its log is gone, and a later one exists: pruned while it still had it to read
        (``LogTail.poll`` then raises ``MissingLogError``)."""
        logs = self.disk.logs
        return (self.tail is not None and self.tail[0] not in logs
                and max(logs, default=0) > self.tail[0])

    def check_tail(self) -> None:
        """``LogTail.poll``'s look for its log (raises ``MissingLogError``)."""
        if self.pruned_under():
            assert self.tail is not None
            self.world.counts["pruned under"] += 1
            raise MissingLogError(str(log_path(self.disk.dir, self.tail[0])),
                                  "removed while this replica still had it to read")

    def can_follow(self) -> bool:
        if self.core.phase is not Phase.FOLLOWING or self.paused or self.taking is not None:
            return False
        if self.pruned_under():
            return True
        if self.tail is None:
            return not self.disk.first_start_pending() and bool(self.disk.checkpoints)
        recs, tail = self._poll()
        return bool(recs) or tail != self.tail

    def follow(self) -> None:
        if self.tail is None:
            self._load_checkpoint()
            return
        self.check_tail()
        recs, tail = self._poll()
        for r in recs:
            self.deliver(r.wire)
            self.core.followed(r.seq, r.inputs)
        if recs:
            self.core.caught_up()
        self.tail = tail

    def _load_checkpoint(self) -> None:
        saved = self.disk.checkpoints[1]  # replicas keep only the first start's here
        self.core.checkpoint_loaded(saved.next_seq, saved.inputs, saved.outputs)
        self.deliver(encode_checkpoint_record(self.core.cid, sum(map(len, saved.chunks)))
                     + b"".join(saved.chunks))
        self.tail = (1, 0, saved.next_seq)
        self.run_actions()

    # -- taking over (``replica._take_over``: the real steps of ``takeover``)
    def can_claim(self, holder_gone: bool) -> bool:
        """Whether it may claim the next epoch, ``holder_gone`` being
        ``World.holder_gone`` of its instance (the same for all its replicas in a step)."""
        return (self.core.phase is Phase.FOLLOWING and not self.paused
                and self.taking is None and holder_gone)

    def claim(self) -> None:
        e = self.epochs.current()
        if not self.epochs.claim(e + 1):
            return
        self.role = "primary"
        self.taking = upgrade_steps.standby_takes_over(self.tail is not None, self.version)
        self.take_over()

    def can_take_over(self) -> bool:
        return self.taking is not None

    def take_over(self) -> None:
        """The takeover's next step (each one a step of the world's)."""
        assert self.taking is not None
        try:
            step = self.taking.send(self._taken)
        except StopIteration:
            self.taking = None
            return
        self._taken = None
        self._take(step)

    def _take(self, step: upgrade_steps.UpgradeStep) -> None:
        disk = self.disk
        if isinstance(step, upgrade_steps.ReadRegistration):
            self._taken = self.world.registered(self.name)
        elif isinstance(step, takeover.LoadCheckpoint):
            if not disk.first_start_pending() and disk.checkpoints:
                self._load_checkpoint()
            self._taken = self.tail is not None
        elif isinstance(step, takeover.FirstStart):
            self._first_start()
        elif isinstance(step, takeover.NewestLog):
            self._taken = max(disk.logs)
        elif isinstance(step, takeover.ReadSeal):
            self._taken = disk.seals.get(step.n)
        elif isinstance(step, takeover.WholeEnd):
            self._taken = disk.logs[step.n].records_end()
        elif isinstance(step, takeover.WriteSeal):
            disk.seals[step.n] = step.end
        elif isinstance(step, takeover.FollowTo):
            while self.tail is not None and self.tail[0] <= step.n:
                self.follow()  # past the seal, the tail moves on to the next log
        elif isinstance(step, takeover.OpenLog):
            self.epochs.check()  # ``FencedSink.next_log``
            if step.n in disk.logs:
                raise LockLostError(f"log {step.n} was created by another primary")
            self.writer = disk.open_log(step.n)
            disk.sync_dir()
            self.log_n = step.n
        else:
            self.core.become_primary()
            self.run_actions()
            self.world.counts["takeover"] += 1
            self._go_live()

    # -- writing, fenced
    def _switch(self) -> None:
        n = self.log_n + 1
        self.epochs.check()
        if n in self.disk.logs:
            raise LockLostError(f"log {n} was created by another primary")
        self.core.switch_log(n, self.sink.checkpoints_on_switch)
        self.writer = self.disk.open_log(n)
        self.disk.sync_dir()  # ``FencedSink.next_log``
        self.log_n = n

    def written(self) -> None:
        """One step of the real ``FencedSink.write_steps``: look for a newer epoch; write
        and sync; look again, and only then deliver. A claim can come between any two:
        a record then lands after the claim (past the seal to come) and nobody may
        deliver it, its writer included."""
        record = self.writing
        assert record is not None and self.writer is not None
        if self.steps is None:
            self.steps = cast(FencedSink, self.sink).write_steps(
                self.writer, record.disk)  # type: ignore[arg-type]
        newest = self.epochs.current() == self.epochs.held
        stage = next(self.steps, None)
        if stage == "checked" and not newest:
            self.world.fail(f"{self.id} looked for a newer epoch than its {self.epochs.held} "
                            f"and went on to write, though epoch {self.epochs.current()} "
                            "was claimed")
        elif stage == "landed":
            if not newest:
                self.world.counts["late"] += 1  # looked before the claim, landed after
            self.world.wrote(self.sink.epoch, self)
        elif stage is None:  # the last look found no newer epoch
            if not newest:
                self.world.fail(f"{self.id} delivers a record it wrote in epoch "
                                f"{self.epochs.held}, which epoch {self.epochs.current()} "
                                "superseded before it looked again")
            self.writing, self.steps = None, None
            self._delivered(record)

    def _write(self, record: TakenRecord) -> None:
        super()._write(record)
        self.world.wrote(self.sink.epoch, self)

    def resume(self) -> None:
        super().resume()
        self.beat_due = True

    def beat(self) -> None:
        """The heartbeat after a pause: renew the lease, then make sure it still holds."""
        self.beat_due = False
        self.epochs.check()


# ---------------------------------------------------------------------- the world
class _OwnSteps:
    """The steps that name one coordinator, made once (``World._steps`` offers them
    before every step)."""

    __slots__ = ("beat", "bind_all", "bind_part", "claim", "commit", "crash", "cut",
                 "follow", "pause", "prune", "restart", "resume", "take_over", "written")

    def __init__(self, node_id: str) -> None:
        self.restart, self.resume = ("restart", node_id), ("resume", node_id)
        self.crash, self.cut = ("crash", node_id), ("crash", node_id, 0.5)
        self.bind_all, self.bind_part = ("bind", node_id, 1.0), ("bind", node_id, 0.4)
        self.commit, self.written = ("commit", node_id), ("written", node_id)
        self.prune, self.beat = ("prune", node_id), ("beat", node_id)
        self.follow, self.claim = ("follow", node_id), ("claim", node_id)
        self.take_over, self.pause = ("take-over", node_id), ("pause", node_id)


class _LinkSteps:
    """The steps that name one sender and destination's connection, made once."""

    __slots__ = ("ack", "drop", "moved", "read_all", "read_part", "send")

    def __init__(self, s: str, d: str) -> None:
        self.send, self.ack = ("send", s, d), ("ack", s, d)
        self.read_all, self.read_part = ("link", s, d, 1.0), ("link", s, d, 0.5)
        self.moved, self.drop = ("moved", s, d), ("drop", s, d)


class World:
    """``n`` instances, each calling every other one for ``rounds`` rounds; instance
    ``i0`` runs as ``replicas`` active/active replicas when that is above 1."""

    def __init__(self, n: int = 3, rounds: int = 3, trigger: int = 700,
                 replicas: int = 1, secondary: bool = False, upgrades: bool = False,
                 aa_upgrade: bool = False, keep: int = 2, raft: bool = False) -> None:
        self.keep = keep  # checkpoints kept when pruning (the registration's)
        self.names = [f"i{k}" for k in range(n)]
        self.cid = {name: 100 + k for k, name in enumerate(self.names)}
        self.rounds = rounds
        self.trigger = trigger
        root = Path(tempfile.mkdtemp(prefix="ambrosia-sim-", dir=_DISK_ROOT))
        weakref.finalize(self, shutil.rmtree, root, True)
        self.root = root
        self.disks = {name: SimDisk(root, name) for name in self.names}
        self.replicated = {"i0": replicas} if replicas > 1 else {}
        # Each instance's coordinators, and the steps that only name instances (made once).
        self._members = {name: [name] if name not in self.replicated else [
            f"{name}/{r}" for r in range(replicas)] for name in self.names}
        self._pairs = [(("cut", a, b), frozenset((a, b))) for a in self.names
                       for b in self.names if a < b]
        self._flips: dict[tuple[str, int], list[Step]] = {}
        self._connect: dict[tuple[str, str], Step] = {}
        self._links: dict[tuple[str, str], _LinkSteps] = {}
        self._own = {node_id: _OwnSteps(node_id) for members in self._members.values()
                     for node_id in members}
        self.secondary = secondary  # its replicas have a checkpointing secondary
        # Per instance, the class its binding runs and the one it upgrades to.
        self.apps: dict[str, tuple[type[Rounds], type[Rounds] | None]] = {}
        self.extras: list[Any] = []  # more kinds of steps (``upgrade.Upgrades``)
        self.nodes: dict[str, Node | None] = {}
        self.conns: dict[tuple[str, str], Conn] = {}
        self.cut: set[frozenset[str]] = set()
        self.trace: list[Step] = []
        self.counts: collections.Counter[str] = collections.Counter()  # what happened
        self.writers: dict[tuple[str, int], Node] = {}  # per directory and epoch, its writer
        self.started: set[str] = set()  # instances that went live once (the registry's)
        self.replays = Replays(self.new_engine)  # for ``check_replay``
        if upgrades:
            from .upgrade import Upgrades
            self.extras.append(Upgrades(self))
        # Its replicas' log in a simulated Raft cluster (``raftstore``), not a directory.
        self.raft: Any = None
        if raft and self.replicated:
            from .raftstore import RaftStore
            self.raft = RaftStore(self)
            self.extras.append(self.raft)
        if aa_upgrade:  # the replica set is upgraded live (``aa_upgrade``)
            from .aa_upgrade import ReplicaUpgrades
            self.extras.append(ReplicaUpgrades(self))
        for name in self.names:
            for node_id in self.members(name):
                self.nodes[node_id] = self._new(node_id)

    def members(self, name: str) -> list[str]:
        return self._members[name]

    def new_engine(self, name: str, cls: type[Rounds] | None = None) -> Engine:
        """A binding for ``name`` running the class registered for it (or ``cls``)."""
        app, upgrade_to = (cls, None) if cls is not None else self.apps.get(name, (Rounds, None))
        engine = Engine(app, name, upgrade_to=upgrade_to,
                        config={"peers": [p for p in self.names if p != name],
                                "rounds": self.rounds})
        engine.attach(None, lambda: None)
        return engine

    def _new(self, node_id: str) -> Node:
        name = node_id.split("/")[0]
        for extra in self.extras:  # ``upgrade``'s standalone nodes, ``aa_upgrade``'s replicas
            make = getattr(extra, "node" if "/" not in node_id else "replica", None)
            if make is not None:
                return cast(Node, make(node_id))
        if "/" not in node_id:
            return Node(self, name)
        if self.raft is not None:
            return cast(Node, self.raft.replica(node_id))
        if self.secondary:
            from .secondary import CheckpointingReplica
            return CheckpointingReplica(self, name, node_id)
        return ReplicaNode(self, name, node_id)

    # -- who serves an instance
    def holder(self, name: str) -> Node | None:
        """The replica holding the newest epoch of ``name`` (the same process), if any."""
        if self.raft is not None:
            return cast(Node | None, self.raft.holder())
        epochs = self.disks[name].epochs
        if not epochs:
            return None
        claim = epochs[max(epochs)]
        for node_id in self._members[name]:
            node = self.nodes[node_id]
            if isinstance(node, ReplicaNode) and node.epochs is claim:
                return node
        return None

    def holder_gone(self, name: str, holder: Node | None) -> bool:
        """Its flock is free (it died) or its lease ran out (it is paused); ``holder``
        is ``holder(name)``."""
        if not self.disks[name].epochs:
            return False  # nobody claimed yet: the first replica to start does
        return holder is None or holder.paused

    def serving(self, name: str) -> Node | None:
        """The live coordinator that links to ``name`` reach, and its calls leave from."""
        return _live(self.holder(name) if name in self.replicated else self.nodes[name])

    def registered(self, name: str) -> int:
        """The version ``name``'s registration names (0: it has none)."""
        for extra in self.extras:
            if (read := getattr(extra, "registered", None)) is not None:
                return cast(int, read(name))
        return 0

    def wrote(self, epoch: int | None, node: Node) -> None:
        """No two primaries write in one epoch (of one directory)."""
        if epoch is None:
            return
        other = self.writers.setdefault((node.disk.dir.name, epoch), node)
        if other is not node:
            self.fail(f"{other.id} and {node.id} both wrote records of epoch {epoch}")

    # -- what can happen now
    def steps(self, faults: bool) -> list[Step]:
        """Every step that can happen now (with faults, or only progress)."""
        progress, faulty = self._steps(faults)
        return progress + faulty if faulty else progress

    def _steps(self, faults: bool) -> tuple[list[Step], list[Step]]:
        """The progress steps that can happen now, and the faults (none unless
        ``faults``): each list in the order ``run`` draws from.

        This runs before every step, so it is written for speed: each coordinator's
        steps are made once (``_own``), and what the loops look at is read into locals
        (loops rather than comprehensions for the same reason)."""
        out: list[Step] = []
        add = out.append
        faulty: list[Step] = []
        fault = faulty.append
        live, idle = Phase.LIVE, Move.IDLE
        # Fixed within a step: who holds each replicated instance's newest epoch.
        holders: dict[str, Node | None] = {}
        gone: dict[str, bool] = {}
        for name in self.replicated:
            holders[name] = holder = self.holder(name)
            gone[name] = self.holder_gone(name, holder)
        nodes, own = self.nodes, self._own
        for node_id, node in nodes.items():
            mine = own.get(node_id)
            if mine is None:  # a replica added since (``aa_upgrade``'s upgrader)
                mine = own[node_id] = _OwnSteps(node_id)
            if node is None:
                add(mine.restart)
                continue
            if node.paused:
                add(mine.resume)
                if faults:
                    fault(mine.crash)
                continue
            if node.inbox:
                add(mine.bind_all)
                add(mine.bind_part)
            if node.next_move() is not idle:  # a kind of node may have its own rule
                add(mine.commit)
            if node.writing is not None:
                add(mine.written)
            if node.pruning:
                add(mine.prune)
            if isinstance(node, ReplicaNode):
                if node.beat_due:
                    add(mine.beat)
                if node.can_follow():
                    add(mine.follow)
                if node.can_claim(gone[node.name]):
                    add(mine.claim)
                if node.can_take_over():
                    add(mine.take_over)
                if faults and node.core.phase is live:
                    fault(mine.pause)
            if faults:
                fault(mine.crash)
                if (node.writing is not None or node.asked is not None or node.flow
                        or node.pruning):
                    fault(mine.cut)  # cutting a write (or pruning) short
        names = self.names
        if faults:
            for name in names:
                disk = self.disks[name]
                if name in self.replicated or nodes[name] is not None or disk.damage:
                    continue
                for k, _ in enumerate(disk.targets()):
                    faulty += self._flip_steps(name, k)
        serving: dict[str, Node | None] = {}
        for name in names:
            node = holders[name] if name in holders else nodes[name]
            serving[name] = (node if node is not None and not node.paused
                             and node.core.phase is live else None)
        conns, cut, connect, links = self.conns, self.cut, self._connect, self._links
        for s in names:
            sender = serving[s]
            if sender is None:
                continue
            for d, box in sender.core.outboxes.items():
                if ((s, d) not in conns and serving[d] is not None
                        and (not cut or frozenset((s, d)) not in cut)
                        and (box.unacked or box.impulses)):
                    step = connect.get((s, d))
                    add(step if step is not None else
                        connect.setdefault((s, d), ("connect", s, d)))
        for pair, conn in conns.items():
            frm, to = nodes[conn.frm], nodes[conn.to]
            assert frm is not None and to is not None
            if frm.paused or to.paused:
                continue  # the kernel holds what is in flight
            link = links.get(pair)
            if link is None:
                link = links[pair] = _LinkSteps(*pair)
            box = frm.core.outboxes[pair[1]]
            sent = box.sent
            if sent is not None and ((box.unacked and box.unacked[-1][0] > sent)
                                     or box.impulses):
                add(link.send)
            if conn.wire and not to.links_paused:
                add(link.read_all)
                add(link.read_part)
            if conn.acks:
                add(link.ack)
            if to is not serving[pair[1]]:
                # The registry names another primary now: the sender leaves (within
                # a look, ``links.MOVE_CHECK``; until then the old one may still read).
                add(link.moved)
            elif faults:
                fault(link.drop)
        for extra in self.extras:
            for step in extra.steps(faults):
                (fault if step[0] in _FAULTS else add)(step)
        if faults:
            for step, pair in self._pairs:
                if pair not in cut:
                    fault(step)
            if cut:
                fault(("heal",))
        return out, faulty

    def _flip_steps(self, name: str, k: int) -> list[Step]:
        """The faults that can befall file ``k`` of ``disk.targets()``: a bit flipped at
        each spot, the file lost."""
        steps = self._flips.get((name, k))
        if steps is None:
            steps = self._flips[(name, k)] = [
                ("flip", name, k, where, spot) for where in (0.0, 0.5, 1.0)
                for spot in _SPOTS] + [("lose", name, k)]
        return steps

    # -- doing it
    def do(self, step: Step) -> None:
        self.trace.append(step)
        kind = step[0]
        self.counts[kind] += 1
        # Whose buffer or inputs the step changes: back-pressure looks after it.
        target = (None if kind not in _REGULATED else self.conns[(step[1], step[2])].to
                  if kind == "link" else step[1])
        try:
            self._do(step)
        except LockLostError as err:  # a fenced primary stops, with one line
            node_id = step[1]
            self._node(node_id).lines.append(str(err))
            self.counts["fenced"] += 1
            self._stop(node_id)
        except VersionSupersededError as err:  # a replica of an older version stops
            node_id = step[1]
            self._node(node_id).lines.append(str(err))
            self.counts["superseded"] += 1
            self._stop(node_id)
        except MissingLogError as err:  # a replica whose log was pruned under it stops
            node_id = step[1]
            self._node(node_id).lines.append(str(err))
            self._stop(node_id)
        if kind == "bind":  # only a binding's reads change an instance's state
            self.check_now(step[1])
        if target is not None and (node := self.nodes.get(target)) is not None:
            node.regulate()

    def _do(self, step: Step) -> None:
        kind = step[0]
        if kind == "bind":
            self._node(step[1]).bind(step[2])
        elif kind == "commit":
            self._node(step[1]).commit()
        elif kind == "written":
            self._node(step[1]).written()
        elif kind == "prune":
            self._node(step[1]).prune()
        elif kind == "crash":
            self._crash(step[1], step[2] if len(step) > 2 else None)
        elif kind == "restart":
            self._restart(step[1])
        elif kind == "flip":
            disk = self.disks[step[1]]
            disk.flip(disk.targets()[step[2]], step[3], step[4])
        elif kind == "lose":
            disk = self.disks[step[1]]
            disk.lose(disk.targets()[step[2]])
        elif kind in ("follow", "claim", "beat"):
            getattr(self._replica(step[1]), kind)()
        elif kind == "take-over":
            self._replica(step[1]).take_over()
        elif kind == "pause":
            self._node(step[1]).paused = True
        elif kind == "resume":
            self._node(step[1]).resume()
        elif kind == "connect":
            s, d = step[1], step[2]
            sender, receiver = self.serving(s), self.serving(d)
            assert sender is not None and receiver is not None and (s, d) not in self.conns
            # The handshake: the receiver names what its log holds from the sender.
            inbound, position = _handshake(s, d, sender.id, receiver.core.logged)
            self.conns[(s, d)] = Conn(sender.id, receiver.id, inbound)
            sender.core.outboxes[d].connected(position)
        elif kind == "send":
            s, d = step[1], step[2]
            conn = self.conns[(s, d)]
            conn.wire += self._node(conn.frm).core.outboxes[d].to_send()
        elif kind == "link":
            self._link(step[1], step[2], step[3])
        elif kind == "ack":
            s, d = step[1], step[2]
            conn = self.conns[(s, d)]
            self._node(conn.frm).core.outboxes[d].trim(conn.acks.pop(0))
        elif kind in ("drop", "moved"):
            self._drop(step[1], step[2])
        elif kind == "cut":
            a, b = step[1], step[2]
            self.cut.add(frozenset((a, b)))
            self._drop(a, b)
            self._drop(b, a)
        elif kind == "heal":
            self.cut.clear()
        elif not any(extra.do(step) for extra in self.extras):
            raise ValueError(f"unknown step {step!r}")

    def _node(self, node_id: str) -> Node:
        node = self.nodes[node_id]
        assert node is not None
        return node

    def _replica(self, node_id: str) -> ReplicaNode:
        node = self.nodes[node_id]
        assert isinstance(node, ReplicaNode)
        return node

    def _link(self, s: str, d: str, fraction: float) -> None:
        conn = self.conns[(s, d)]
        n = max(1, round(len(conn.wire) * fraction))
        data, conn.wire = conn.wire[:n], conn.wire[n:]
        receiver = self._node(conn.to)
        # Back-pressure held: a link is read only while neither limit is passed, so what
        # waits passes the limit by at most what one read brings.
        waiting, unread = len(receiver.core.group.pending), len(receiver.inbox)
        if waiting > PENDING_LIMIT or unread > BUFFER_LIMIT:
            self.fail(f"{receiver.id} read a link with {waiting} inputs waiting for the "
                      f"log (limit {PENDING_LIMIT}) and {unread} bytes unread by its "
                      f"binding (limit {BUFFER_LIMIT})")
        actions = conn.inbound.receive(data)
        while actions:
            action = actions.pop(0)
            if isinstance(action, Records):
                try:
                    for rec in action.records:
                        if 0 <= rec.seq_id - rec.calls < receiver.core.intake.position(s) \
                                < rec.seq_id:
                            self.counts["overlap"] += 1  # partly taken before: the rest is new
                        receiver.core.link_record(s, rec)
                except RemoteProtocolError as err:  # a gap in the calls
                    actions = conn.inbound.broken(err)
            elif isinstance(action, Log):
                receiver.lines.append(action.line)
            elif isinstance(action, Close):  # the link server closes the connection
                # Between the simulation's coordinators (one secret, honest peers, links
                # that lose bytes only at their end) nothing is refused or broken.
                self.fail(f"{receiver.id} closed the link from {s}: {receiver.lines[-1]}")
            # Its timer (a record begun, then a stall) is not simulated.

    def _drop(self, s: str, d: str) -> None:
        conn = self.conns.pop((s, d), None)
        if conn is not None:
            sender = self.nodes.get(conn.frm)
            if sender is not None and d in sender.core.outboxes:
                sender.core.outboxes[d].disconnected()

    def _crash(self, node_id: str, cut: float | None) -> None:
        """The process dies: what it had not synced is lost; with ``cut``, the write in
        progress leaves that part of itself, and a checkpoint being written its
        temporary file."""
        node = self._node(node_id)
        disk = node.disk
        if cut is not None and node.pruning:  # it dies before pruning syncs the directory
            self.prune(node, cut)
        self._stop(node_id)
        lost = disk.crash()
        if lost:
            self.fail(f"{node_id} crashed, and with the entries of {disk.dir.name} never "
                      f"synced, its log {lost[0]} went, which held synced records")
        if cut is None:
            return
        if node.writing is not None and node.writer is not None:
            data = node.writing.disk
            node.writer.tear(data[: min(len(data) - 1, max(1, round(len(data) * cut)))])
            self.counts["torn"] += 1
        writing = (node.asked if node.asked is not None else
                   1 if node.flow == "first" else node.log_n
                   if node.flow in ("recover", "upgrade") and not node.pruning else None)
        if writing is not None:  # the checkpoint it was taking was being written
            disk.leave_temporary(writing, b"AMBRCKP2" + bytes(40))
            self.counts["temporary"] += 1

    def _restart(self, node_id: str) -> None:
        """A new process for ``node_id``. A start refused must say why in one line
        naming the file, with nothing in the directory changed, and only over damage
        (which is then repaired, as from a backup); a start that goes on must not have
        read damage as valid, and leaves no temporary checkpoint behind."""
        name = node_id.split("/")[0]
        disk = self.disks[name]
        damaged = list(disk.damage)
        # What a refused start must leave as it was (a start refused with no damage
        # fails the run before the directory is looked at).
        before = disk.files() if damaged else None
        try:
            node = self.nodes[node_id] = self._new(node_id)
        except Refused as err:
            self.counts["refused"] += 1
            text = str(err.__cause__ or err.args[0]).replace(str(self.root), "<disk>")
            if not damaged:
                self.fail(f"{node_id} refused to start over an intact directory: {text}")
            # A flipped bit is named by its file; a file lost, by its directory at least.
            named = any(path.name in text or (at is None and f"<disk>/{name}" in text)
                        for path, at, _ in damaged)
            if "\n" in text or not named:
                self.fail(f"{node_id} refused to start with {text!r}: not one line naming "
                          "the damaged file")
            after = disk.files()
            if after != before:
                assert before is not None
                gone = sorted(set(before) - set(after))
                self.fail(f"{node_id}'s refused start changed its directory"
                          + (f" (pruned {', '.join(gone)})" if gone else ""))
            disk.repair()
            return
        plan = node.plan
        if damaged and plan is not None:
            read = {checkpoint_path(disk.dir, plan.number)} | {
                log_path(disk.dir, k) for k in plan.logs}
            for path, at, _ in damaged:
                if path in read and at is not None:
                    self.fail(f"{node_id} recovered from {path.name}, damaged at {at}, as "
                              "if it were intact")
            self.counts["repaired"] += 1
        left = sorted(set(disk.temporaries() + node.disk.temporaries()))
        if left and name not in self.replicated:
            self.fail(f"{node_id} started, and left {', '.join(left)}")
        # A checkpoint the recovery passed over stays damaged until its pruning is done
        # (what it counts as kept is then seen); the rest is repaired, as from a backup.
        disk.repair(but={checkpoint_path(node.disk.dir, n) for n in node.damaged})
        self.check_kept(node, "after it started")

    def _stop(self, node_id: str) -> None:
        """The process of ``node_id`` is gone (its writes stay where the disk has them)."""
        for (s, d), conn in list(self.conns.items()):
            if node_id in (conn.frm, conn.to):
                self._drop(s, d)
        self.nodes[node_id] = None

    # -- pruning
    def prune(self, node: Node, cut: float | None = None) -> None:
        """``checkpoints.remove_unkept`` (the real sink's rule, on the real directory),
        then what writers killed while writing a checkpoint left: from checkpoint 1 on
        (2 for the checkpointing secondary), through the newest. With ``cut``, the
        process dies before the directory is synced (``SimDisk.prune``). Checked: each
        kept checkpoint has every log after it, and as many intact checkpoints as
        ``keep`` asks for stay (all there were, if fewer)."""
        disk = node.disk
        gone, intact, now = disk.prune(node.sink, self.keep, node.damaged, cut)
        self.counts["pruned"] += len(gone)
        if cut is not None:
            self.counts["pruning cut"] += 1
            return
        first = 2 if node.pruning == "secondary" else 1
        logstore.remove_checkpoint_temps(disk.dir, first, recovery.latest_checkpoint(disk.dir))
        self.check_kept(node, "after pruning", every=True)
        if len(now) < min(self.keep, len(intact)):
            self.fail(f"{node.id} pruned its intact checkpoints {intact} to {now}, but "
                      f"{self.keep} are kept (a damaged one counted: {node.damaged})")

    def check_kept(self, node: Node, when: str, every: bool = False) -> None:
        """Each kept checkpoint (the newest ``keep``; with ``every``, all there are) has
        every log after it: what a repro from it reads."""
        missing = node.disk.missing_log(None if every else self.keep)
        if missing is not None:
            self.fail(f"{node.id} keeps checkpoint {missing[0]} {when}, but its log "
                      f"{missing[1]} is gone")

    # -- runs
    def run(self, rng: random.Random, fault_steps: int, fault_rate: float,
            end_steps: int = 20_000) -> None:
        """Steps drawn by ``rng``: ``fault_steps`` with faults (each step a fault with
        about ``fault_rate``), then healed, until nothing is left to do."""
        for _ in range(fault_steps):
            progress, faults = self._steps(faults=True)
            if faults and (not progress or rng.random() < fault_rate):
                kind = rng.choice(sorted({f[0] for f in faults}))  # each kind as often
                self.do(rng.choice([f for f in faults if f[0] == kind]))
            elif progress:
                self.do(rng.choice(progress))
        self.settle(rng, end_steps)

    def settle(self, rng: random.Random, end_steps: int = 20_000) -> None:
        """Heal everything and run until no step is left; then check the outcome."""
        if self.cut:
            self.do(("heal",))
        for _ in range(end_steps):
            progress = self.steps(faults=False)
            if not progress:
                self.check_end()
                return
            self.do(rng.choice(progress))
        said = "; ".join(f"{node_id}: {node.lines[-1]}" for node_id, node in self.nodes.items()
                         if node is not None and node.lines)
        raise SimFailure(f"no end after {end_steps} steps without faults (the same steps "
                         f"repeat){'; last said: ' + said if said else ''}", list(self.trace))

    def replay(self, trace: list[Step], rng: random.Random) -> None:
        """Run the steps of ``trace`` that can happen (in order), then settle."""
        for step in trace:
            if (step[0] == "heal" and self.cut) or step in self.steps(faults=True):
                self.do(step)
        self.settle(rng)

    # -- the invariants
    def fail(self, message: str) -> None:
        raise SimFailure(message, list(self.trace))

    def check_now(self, node_id: str) -> None:
        """Every call applied at most once and in order, every answer in order."""
        node = self.nodes[node_id]
        state = node.observed() if node is not None else None
        if state is not None:
            for origin, ks in state["applied"].items():
                if ks != list(range(1, len(ks) + 1)):
                    self.fail(f"{node_id} applied the pings of {origin} as {ks}")
            for origin, ks in state["echoed"].items():
                if ks != sorted(set(ks)):
                    self.fail(f"{node_id} answered the echoes of {origin} as {ks}")
            if state["answers"] != [10 * k for k in range(1, len(state["answers"]) + 1)]:
                self.fail(f"{node_id} got the answers {state['answers']}")

    def check_end(self) -> None:
        """Everything arrived, once; each state is a replay of its log, and every
        replica that follows has the primary's."""
        r = self.rounds
        for name in self.names:
            node = self.serving(name)
            if node is None:
                self.fail(f"nothing serves {name} at the end")
                return
            state = node.observed()
            assert state is not None
            peers = [p for p in self.names if p != name]
            want = {
                "applied": {p: list(range(1, r + 1)) for p in peers},
                "answers": [10 * k for k in range(1, r + 1)],
                "round": r,
            }
            got = {k: state[k] for k in want}
            if got != want:
                self.fail(f"{node.id} ended with {got}, expected {want}")
            if node.core.ckpt.switch_wanted:
                self.fail(f"{node.id} ended with a log switch wanted and never made (its "
                          "log grows without a checkpoint)")
            for p in peers:
                theirs = [q for q in self.names if q != p]
                awaited = [k for k in range(1, r + 1) if theirs[k % len(theirs)] == name]
                if state["echoed"].get(p, []) != awaited:
                    self.fail(f"{node.id} answered {p}'s echoes {state['echoed'].get(p)}, "
                              f"expected {awaited}")
            self.check_replay(node, "at the end")
            for node_id in self.members(name):
                other = self.nodes[node_id]
                if (other is not None and other is not node
                        and other.core.phase is Phase.FOLLOWING
                        and other.observed() != state):
                    self.fail(f"{node_id} follows with {other.observed()}, but the "
                              f"primary {node.id} has {state}")
        for extra in self.extras:
            extra.check_end()

    def check_replay(self, node: Node, when: str) -> None:
        """``node``'s state equals a fresh binding's replay of its durable log from
        the oldest checkpoint kept (the oldest with every log from it on)."""
        kept = node.disk.replay_from()
        if kept is None:
            self.fail(f"{node.id} has no checkpoint with every log after it {when}")
            return
        first, records = kept
        replayed = self.replays.state(node.name, node.disk.app, node.core.cid, first,
                                      [r.wire for r in records])
        if replayed != node.observed():
            self.fail(f"{node.id}'s state {when} is {node.observed()}, but a replay of "
                      f"its log gives {replayed}")


_SECRET = b"simulated link secret"


def _handshake(sender: str, dest: str, sender_id: str,
               logged: Callable[[str], int]) -> tuple[InboundLink, int]:
    """The link handshake's real steps, both ends: the receiver's ``InboundLink`` (the
    link server's rules) admits the sender, and the sender (``links.handshake``) takes the
    position to resume from out of the receiver's reply (``logged``: its log's, as the
    link server answers)."""
    inbound = InboundLink(_SECRET, dest, sender_id)
    head = _sent(inbound.start())
    hello, nonce_c = handshake.make_hello(head, _SECRET, sender, dest, dest)
    asked = inbound.receive(hello)
    assert asked == [Ask(sender, False)], asked
    reply = _sent(inbound.answer(logged(sender)))
    return inbound, handshake.reply_position(reply, _SECRET, head, nonce_c, dest, dest)


def _live(node: Node | None) -> Node | None:
    """``node``, if it is up, not paused and live."""
    if node is None or node.paused or node.core.phase is not Phase.LIVE:
        return None
    return node


def _sent(actions: list[InboundAction]) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, Send))


def _observed(engine: Engine) -> dict[str, Any] | None:
    inst = engine.instance
    return None if inst is None else cast(Rounds, inst).observed()


class Seeded:
    """What each world's scenario (a run drawn from a seed) shares: a trace replayed
    fails or not (``shrink`` asks), given ``run`` and ``replay``."""

    __slots__ = ()

    def run(self) -> Any:
        raise NotImplementedError

    def replay(self, trace: list[Step]) -> Any:
        raise NotImplementedError

    def fails(self, trace: list[Step]) -> bool:
        try:
            self.replay(trace)
        except SimFailure:
            return True
        return False


@attrs.frozen
class Scenario(Seeded):
    """One run's parameters, all drawn from its seed: the size of the world, how long
    faults go on and how often they come."""

    seed: int
    n: int
    rounds: int
    trigger: int
    fault_steps: int
    fault_rate: float
    replicas: int = 1
    secondary: bool = False  # the replicas have a checkpointing secondary
    upgrades: bool = False  # the standalone instances may be upgraded live
    raft: bool = False  # a simulated Raft cluster's replicas run too (``raftlog``)
    raft_store: bool = False  # the replicas' log is in a simulated Raft cluster (``raftstore``)
    keep: int = 2  # checkpoints kept when pruning (``keep_checkpoints``)
    aa_upgrade: bool = False  # the replica set may be upgraded live (``aa_upgrade``)

    @classmethod
    def of(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        return cls(seed, n=rng.choice([2, 3, 3]), rounds=rng.choice([2, 3, 4]),
                   trigger=rng.choice([400, 900, 1 << 30]),
                   fault_steps=rng.randrange(20, 120),
                   fault_rate=rng.choice([0.05, 0.15, 0.3]),
                   replicas=rng.choice([1, 1, 2, 3]), secondary=rng.random() < 0.5,
                   upgrades=rng.random() < 0.5,
                   raft=random.Random(seed ^ 0x7AF7).random() < 0.1,
                   keep=random.Random(seed ^ 0x6EE9).choice([1, 2, 3]),
                   aa_upgrade=random.Random(seed ^ 0xAA09).random() < AA_UPGRADES)

    def world(self) -> World:
        return World(n=self.n, rounds=self.rounds, trigger=self.trigger,
                     replicas=self.replicas, secondary=self.secondary and self.replicas > 1,
                     upgrades=self.upgrades, keep=self.keep, raft=self.raft_store,
                     aa_upgrade=(self.aa_upgrade and self.replicas > 1 and not self.secondary
                                 and not self.raft_store))

    def run(self) -> World:
        """The run the seed draws (raises ``SimFailure``)."""
        w = self.world()
        w.run(random.Random(self.seed), self.fault_steps, self.fault_rate)
        return self._raft(w)

    def _raft(self, w: World) -> World:
        if self.raft:
            from .raftlog import run_raft  # raftlog raises this module's SimFailure

            w.counts.update(run_raft(self.seed))
        return w

    def replay(self, trace: list[Step]) -> World:
        """``trace``'s steps, then settled as the seed would (raises ``SimFailure``)."""
        w = self.world()
        w.replay(trace, random.Random(self.seed))
        return self._raft(w)


def explain(seed: int) -> str:
    """What a failing seed did: its failure and a shortest run that still fails."""
    return explain_seed(seed, Scenario.of)


def explain_seed(seed: int, of: Callable[[int], Seeded]) -> str:
    """What seed ``seed`` of a world's scenarios (``of``) did: passed, or its failure and
    a shortest run that still fails, with what that run fails with."""
    scenario = of(seed)
    try:
        scenario.run()
    except SimFailure as err:
        short = shrink(err.trace, scenario.fails)
        try:
            scenario.replay(short)
        except SimFailure as again:
            why = str(again)
        else:  # cannot happen: shrink keeps only failing traces
            why = str(err)
        steps = "\n".join(f"  {i:4d} {step}" for i, step in enumerate(short))
        return (f"seed {seed} ({scenario}) failed: {err}\n"
                f"a shortest run found ({len(short)} of {len(err.trace)} steps, then "
                f"settled as the seed settles) fails with: {why}\n{steps}")
    return f"seed {seed} passes"


def shrink(trace: list[Step], fails: Callable[[list[Step]], bool]) -> list[Step]:
    """A shorter list of steps that still ``fails`` (delta debugging: drop chunks of
    steps, then single steps, while the failure holds)."""
    chunk = max(1, len(trace) // 2)
    while chunk >= 1:
        i = 0
        while i < len(trace):
            candidate = trace[:i] + trace[i + chunk:]
            if fails(candidate):
                trace = candidate
            else:
                i += chunk
        chunk //= 2
    return trace
