"""A deterministic simulation of many coordinators, their bindings and the links between
them, in one process, driven by one seeded scheduler (FoundationDB's way of testing).

What runs is the real thing, in memory: each instance is a ``CoordinatorCore`` (every
decision the live coordinator makes) with the real ``StandaloneSink`` writing into a
simulated disk, and its binding is the real ``Engine`` running ``app.Rounds``. What is
simulated is only what moves bytes: the disk (writes are lost at a crash unless synced;
a checkpoint is durable once saved, as by a synced rename), the binding's socket (bytes
delivered wait until the binding reads them, in pieces), and the links (a connection
per sender and destination, its bytes delivered in pieces, acknowledgements on their
way back, connections dropped, pairs of instances cut apart and healed). The shell of
each coordinator here does what ``coordinator.lifecycle``, ``startup``, ``commit`` and
``checkpoints`` do around the core: the same steps in the same order.

A run is a list of steps. ``World.run`` draws them from a seed (faults first, then
the world heals and runs until nothing is left to do); ``World.replay`` runs a given
list, skipping steps that cannot happen. After every step the invariants are checked
(``check_now``), and at the end the outcome (``check_end``):

- every call is applied exactly once and in order (each ping of each round once, no
  gap); every awaited result arrives, in order;
- a recovered instance's state, as it goes live, equals a replay of its durable log
  from its first checkpoint by a fresh binding; so does every instance's at the end.

``shrink`` cuts a failing run down to a shortest list of steps that still fails.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Iterator
from typing import Any, cast

import attrs
from ambrosia_ic.coordinator.core import (
    CheckpointData,
    CheckpointReceived,
    CoordinatorCore,
    InitialReceived,
    LogLine,
)
from ambrosia_ic.coordinator.frames import LinkRecords
from ambrosia_ic.coordinator.group_commit import Record
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.coordinator.sink import StandaloneSink
from ambrosia_ic.logstore.watermarks import decode_watermarks

from ambrosia_py.errors import RemoteProtocolError
from ambrosia_py.runtime.engine import Engine, SendCheckpoint
from ambrosia_py.wire import (
    HEADER_SIZE,
    InitialMessage,
    TakeBecomingPrimaryCheckpoint,
    encode_checkpoint_record,
)
from ambrosia_py.wire.records import HEADER

from .app import Rounds

__all__ = ["Scenario", "SimFailure", "Step", "World", "explain", "shrink"]

MAX_RECORD = 1 << 20
_FAULTS = frozenset({"crash", "drop", "cut", "heal"})
Step = tuple[Any, ...]  # ("action", *arguments)


class SimFailure(AssertionError):  # noqa: N818 (an assertion, as pytest shows it)
    """An invariant broke; ``trace`` is the run's steps up to the failure."""

    def __init__(self, message: str, trace: list[Step]) -> None:
        super().__init__(message)
        self.trace = trace


# ---------------------------------------------------------------------- the disk
class SimLog:
    """One log file: what was written, and how much of it is synced (the sink's
    ``LogWriter`` surface). A crash keeps the synced bytes only."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.synced = 0

    @property
    def size(self) -> int:
        return len(self.data)

    def write(self, data: bytes) -> None:
        self.data += data

    def sync(self) -> None:
        self.synced = len(self.data)

    def trim(self) -> None:
        pass

    def close(self) -> None:
        pass

    def records(self) -> Iterator[tuple[int, bytes, dict[str, int]]]:
        """``(seq_id, wire, inputs)`` of each record in the synced bytes."""
        data = bytes(self.data[:self.synced])
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            cid, size, check, seq = HEADER.unpack_from(data, pos)
            length = -size - 1  # the disk form's length is negative
            end = pos + length
            wire = HEADER.pack(cid, length, check, seq) + data[pos + HEADER_SIZE:end]
            inputs, pos, _ = decode_watermarks(data, end, len(data))
            yield seq, wire, inputs


@attrs.define
class SavedCheckpoint:
    next_seq: int
    inputs: dict[str, int]
    outputs: dict[str, Any]
    chunks: list[bytes]


class SimDisk:
    """An instance's log directory: numbered logs and checkpoints."""

    def __init__(self) -> None:
        self.logs: dict[int, SimLog] = {}
        self.checkpoints: dict[int, SavedCheckpoint] = {}

    def open_log(self, n: int) -> SimLog:
        log = self.logs[n] = SimLog()
        return log

    def crash(self) -> None:
        for log in self.logs.values():
            del log.data[log.synced:]

    def first_start_pending(self) -> bool:
        """No record 0 is durable: the next start is a first start."""
        return not any(log.synced for log in self.logs.values())

    def durable_records(self, from_seq: int) -> list[tuple[int, bytes, dict[str, int]]]:
        out = []
        for n in sorted(self.logs):
            out += [r for r in self.logs[n].records() if r[0] >= from_seq]
        return out


# ---------------------------------------------------------------------- links
@attrs.define
class Conn:
    """One link connection from a sender to a destination, while it is up."""

    wire: bytes = b""
    parser: LinkRecords = attrs.field(factory=LinkRecords)
    acks: list[int] = attrs.field(factory=list)


# ---------------------------------------------------------------------- a coordinator
class Node:
    """One instance's coordinator (the core, the shell's steps) and its binding."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.disk = world.disks[name]
        self.sink = StandaloneSink(region=0)  # the real one, writing a SimLog
        self.core = CoordinatorCore(name, world.cid[name], trigger_bytes=world.trigger,
                                    keeps_early_impulses=self.sink.keeps_early_impulses)
        peers = [p for p in world.names if p != name]
        self.engine = Engine(Rounds, name, config={"peers": peers,
                                                    "rounds": world.rounds})
        self.engine.attach(None, lambda: None)
        self.inbox = bytearray()  # delivered to the binding, not yet read
        self.writer: SimLog | None = None
        self.log_n = 0
        self.lines: list[str] = []
        self.initial: InitialMessage | None = None
        self.received: dict[int, CheckpointData] = {}
        self.flow = ""  # the start-up step waited for: "first", "recover", "" once live
        self.asked: tuple[int, tuple[int, dict[str, int]]] | None = None  # a switch's
        self.recovered = False
        self.writing: Record | None = None  # taken; its write and sync in progress
        self._start()

    # -- start-up (``startup``)
    def _start(self) -> None:
        core = self.core
        if self.disk.first_start_pending():
            self.disk.logs.clear()  # the leftovers of an interrupted first start
            self.disk.checkpoints.clear()
            self.deliver(core.begin_first_start())
            self.flow = "first"
            return
        n = max(self.disk.checkpoints)
        saved = self.disk.checkpoints[n]
        replay = self.disk.durable_records(saved.next_seq)
        # The log's position is after its last durable record; the outputs are the
        # checkpoint's (``recovery.plan_recovery``).
        next_seq, inputs = ((replay[-1][0] + 1, replay[-1][2]) if replay
                            else (saved.next_seq, saved.inputs))
        core.begin_recovery(saved.next_seq, next_seq, inputs, saved.outputs)
        self.deliver(encode_checkpoint_record(core.cid, sum(map(len, saved.chunks)))
                     + b"".join(saved.chunks))
        for seq, wire, _ in replay:
            self.deliver(wire)
            core.last_delivered = seq
        self.log_n = max(self.disk.logs) + 1
        self.deliver(core.ask_checkpoint(self.log_n, TakeBecomingPrimaryCheckpoint()))
        self.flow = "recover"
        self.run_actions()

    def _advance_start(self) -> None:
        core = self.core
        if self.flow == "first" and self.initial is not None and 1 in self.received:
            _, chunks, outputs = self.received.pop(1)
            self.disk.checkpoints[1] = SavedCheckpoint(0, {}, outputs, chunks)
            self.writer = self.disk.open_log(1)
            self.log_n = 1
            core.first_record(self.initial)
            self._commit_one()  # record 0, durably, before anything else
            self._go_live()
        elif self.flow == "recover" and self.log_n in self.received:
            _message, chunks, outputs = self.received.pop(self.log_n)
            self.writer = self.disk.open_log(self.log_n)
            self.disk.checkpoints[self.log_n] = SavedCheckpoint(
                core.group.next_seq, dict(core.group.inputs), outputs, chunks)
            self.recovered = True
            self._go_live()

    def _go_live(self) -> None:
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
        self.engine.receive_data(data)
        while (out := self.engine.next_output()) is not None:
            raw = b"".join(out.chunks()) if isinstance(out, SendCheckpoint) else out.data
            self.core.receive_binding(raw)
            self.run_actions()

    def run_actions(self) -> None:
        for action in self.core.take_actions():
            if isinstance(action, CheckpointReceived):
                self.received[action.n] = action.data
                if self.asked is not None and self.asked[0] == action.n:
                    self._save_switch()
            elif isinstance(action, InitialReceived):
                self.initial = action.message
            elif isinstance(action, LogLine):
                self.lines.append(action.text)
            # OpenLink: the world dials a destination the core has an outbox for
        self.core.wake = False
        if self.flow:
            self._advance_start()

    # -- the committer (``commit``, ``checkpoints.switch_log``)
    def can_commit(self) -> bool:
        core = self.core
        return (core.phase is Phase.LIVE and self.writing is None
                and (bool(core.group.pending) or core.ckpt.switch_wanted))

    def commit(self) -> None:
        """The committer's next move: a log switch if one is wanted, else the next
        record is taken and its write and sync begin (they end with ``written``: the
        shell's thread mode, where everything else goes on meanwhile)."""
        if self.core.ckpt.switch_wanted:
            self._switch()
        else:
            self.writing = self.core.take(MAX_RECORD, self.sink.epoch)

    def written(self) -> None:
        record, self.writing = self.writing, None
        assert record is not None
        self._write(record)

    def _commit_one(self) -> None:
        self._write(self.core.take(MAX_RECORD, self.sink.epoch))

    def _write(self, record: Record) -> None:
        core = self.core
        assert self.writer is not None
        self.sink.write(self.writer, record.disk)  # type: ignore[arg-type]
        out = core.durable(record, self.writer.size)
        self.deliver(out.wire)
        for sender, position in out.acks.items():
            conn = self.world.conns.get((sender, self.name))
            if conn is not None:
                conn.acks.append(position)

    def _switch(self) -> None:
        core = self.core
        n = self.log_n + 1
        self.writer = self.disk.open_log(n)
        self.log_n = n
        asked = core.switch_log(n, self.sink.checkpoints_on_switch)
        assert asked is not None
        position, request = asked
        self.asked = (n, position)
        self.deliver(request)

    def _save_switch(self) -> None:
        assert self.asked is not None
        n, (next_seq, inputs) = self.asked
        self.asked = None
        _message, chunks, outputs = self.received.pop(n)
        self.disk.checkpoints[n] = SavedCheckpoint(next_seq, inputs, outputs, chunks)
        self.core.checkpoint_saved()
        self.world.counts["checkpoint"] += 1

    def observed(self) -> dict[str, Any] | None:
        return _observed(self.engine)


# ---------------------------------------------------------------------- the world
class World:
    """``n`` instances, each calling every other one for ``rounds`` rounds."""

    def __init__(self, n: int = 3, rounds: int = 3, trigger: int = 700) -> None:
        self.names = [f"i{k}" for k in range(n)]
        self.cid = {name: 100 + k for k, name in enumerate(self.names)}
        self.rounds = rounds
        self.trigger = trigger
        self.disks = {name: SimDisk() for name in self.names}
        self.nodes: dict[str, Node | None] = {}
        self.conns: dict[tuple[str, str], Conn] = {}
        self.cut: set[frozenset[str]] = set()
        self.trace: list[Step] = []
        self.counts: collections.Counter[str] = collections.Counter()  # what happened
        for name in self.names:
            self.nodes[name] = Node(self, name)

    # -- what can happen now
    def live(self, name: str) -> Node | None:
        node = self.nodes[name]
        return node if node is not None and node.core.phase is Phase.LIVE else None

    def steps(self, faults: bool) -> list[Step]:
        """Every step that can happen now (with faults, or only progress)."""
        out: list[Step] = []
        for name, node in self.nodes.items():
            if node is None:
                out.append(("restart", name))
                continue
            if node.inbox:
                out += [("bind", name, 1.0), ("bind", name, 0.4)]
            if node.can_commit():
                out.append(("commit", name))
            if node.writing is not None:
                out.append(("written", name))
            if faults:
                out.append(("crash", name))
        for s in self.names:
            sender = self.live(s)
            if sender is None:
                continue
            for d, box in sender.core.outboxes.items():
                conn = self.conns.get((s, d))
                if conn is None:
                    if (self.live(d) is not None and frozenset((s, d)) not in self.cut
                            and (box.unacked or box.impulses)):
                        out.append(("connect", s, d))
                    continue
                if box.sent is not None and ((box.unacked and box.unacked[-1][0] > box.sent)
                                             or box.impulses):
                    out.append(("send", s, d))
                if conn.wire:
                    out += [("link", s, d, 1.0), ("link", s, d, 0.5)]
                if conn.acks:
                    out.append(("ack", s, d))
                if faults:
                    out.append(("drop", s, d))
        if faults:
            for a in self.names:
                for b in self.names:
                    if a < b and frozenset((a, b)) not in self.cut:
                        out.append(("cut", a, b))
            if self.cut:
                out.append(("heal",))
        return out

    # -- doing it
    def do(self, step: Step) -> None:
        self.trace.append(step)
        kind = step[0]
        self.counts[kind] += 1
        if kind == "bind":
            self._node(step[1]).bind(step[2])
        elif kind == "commit":
            self._node(step[1]).commit()
        elif kind == "written":
            self._node(step[1]).written()
        elif kind == "crash":
            self._crash(step[1])
        elif kind == "restart":
            self.nodes[step[1]] = Node(self, step[1])
        elif kind == "connect":
            s, d = step[1], step[2]
            self.conns[(s, d)] = Conn()
            # The handshake: the receiver names what its log holds from the sender.
            self._node(s).core.outboxes[d].connected(self._node(d).core.logged(s))
        elif kind == "send":
            s, d = step[1], step[2]
            self.conns[(s, d)].wire += self._node(s).core.outboxes[d].to_send()
        elif kind == "link":
            self._link(step[1], step[2], step[3])
        elif kind == "ack":
            s, d = step[1], step[2]
            self._node(s).core.outboxes[d].trim(self.conns[(s, d)].acks.pop(0))
        elif kind == "drop":
            self._drop(step[1], step[2])
        elif kind == "cut":
            a, b = step[1], step[2]
            self.cut.add(frozenset((a, b)))
            self._drop(a, b)
            self._drop(b, a)
        elif kind == "heal":
            self.cut.clear()
        else:
            raise ValueError(f"unknown step {step!r}")
        self.check_now()

    def _node(self, name: str) -> Node:
        node = self.nodes[name]
        assert node is not None
        return node

    def _link(self, s: str, d: str, fraction: float) -> None:
        conn = self.conns[(s, d)]
        n = max(1, round(len(conn.wire) * fraction))
        data, conn.wire = conn.wire[:n], conn.wire[n:]
        receiver = self._node(d)
        try:
            for rec in conn.parser.receive_data(data):
                if 0 <= rec.seq_id - rec.calls < receiver.core.intake.position(s) < rec.seq_id:
                    self.counts["overlap"] += 1  # partly taken before: the rest is new
                receiver.core.link_record(s, rec)
        except RemoteProtocolError as err:  # the link server closes the connection
            receiver.lines.append(f"link from {s} broke the protocol: {err}")
            self._drop(s, d)

    def _drop(self, s: str, d: str) -> None:
        if self.conns.pop((s, d), None) is not None:
            sender = self.nodes[s]
            if sender is not None and d in sender.core.outboxes:
                sender.core.outboxes[d].disconnected()

    def _crash(self, name: str) -> None:
        for s, d in list(self.conns):
            if name in (s, d):
                self._drop(s, d)
        self.nodes[name] = None
        self.disks[name].crash()

    # -- runs
    def run(self, rng: random.Random, fault_steps: int, fault_rate: float,
            end_steps: int = 20_000) -> None:
        """Steps drawn by ``rng``: ``fault_steps`` with faults (each step a fault with
        about ``fault_rate``), then healed, until nothing is left to do."""
        for _ in range(fault_steps):
            every = self.steps(faults=True)
            progress = [s for s in every if s[0] not in _FAULTS]
            faults = [s for s in every if s[0] in _FAULTS]
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
        said = "; ".join(f"{name}: {node.lines[-1]}" for name, node in self.nodes.items()
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

    def check_now(self) -> None:
        """Every call applied at most once and in order, every answer in order."""
        for name, node in self.nodes.items():
            state = node.observed() if node is not None else None
            if state is None:
                continue
            for origin, ks in state["applied"].items():
                if ks != list(range(1, len(ks) + 1)):
                    self.fail(f"{name} applied the pings of {origin} as {ks}")
            for origin, ks in state["echoed"].items():
                if ks != sorted(set(ks)):
                    self.fail(f"{name} answered the echoes of {origin} as {ks}")
            if state["answers"] != [10 * k for k in range(1, len(state["answers"]) + 1)]:
                self.fail(f"{name} got the answers {state['answers']}")

    def check_end(self) -> None:
        """Everything arrived, once, and each state is a replay of its log."""
        r = self.rounds
        for name in self.names:
            node = self._node(name)
            if node.core.phase is not Phase.LIVE:
                self.fail(f"{name} is still {node.core.phase.value}")
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
                self.fail(f"{name} ended with {got}, expected {want}")
            for p in peers:
                theirs = [q for q in self.names if q != p]
                awaited = [k for k in range(1, r + 1) if theirs[k % len(theirs)] == name]
                if state["echoed"].get(p, []) != awaited:
                    self.fail(f"{name} answered {p}'s echoes {state['echoed'].get(p)}, "
                              f"expected {awaited}")
            self.check_replay(node, "at the end")

    def check_replay(self, node: Node, when: str) -> None:
        """``node``'s state equals a fresh binding's replay of its durable log from
        its first checkpoint."""
        first = node.disk.checkpoints.get(1)
        if first is None:
            self.fail(f"{node.name} has no first checkpoint {when}")
            return
        peers = [p for p in self.names if p != node.name]
        fresh = Engine(Rounds, node.name, config={"peers": peers, "rounds": self.rounds})
        fresh.attach(None, lambda: None)
        fresh.receive_data(encode_checkpoint_record(node.core.cid, sum(map(len, first.chunks)))
                           + b"".join(first.chunks))
        for _, wire, _ in node.disk.durable_records(0):
            fresh.receive_data(wire)
        while fresh.next_output() is not None:
            pass
        replayed = _observed(fresh)
        if replayed != node.observed():
            self.fail(f"{node.name}'s state {when} is {node.observed()}, but a replay of "
                      f"its log gives {replayed}")


def _observed(engine: Engine) -> dict[str, Any] | None:
    inst = engine.instance
    return None if inst is None else cast(Rounds, inst).observed()


@attrs.frozen
class Scenario:
    """One run's parameters, all drawn from its seed: the size of the world, how long
    faults go on and how often they come."""

    seed: int
    n: int
    rounds: int
    trigger: int
    fault_steps: int
    fault_rate: float

    @classmethod
    def of(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        return cls(seed, n=rng.choice([2, 3, 3]), rounds=rng.choice([2, 3, 4]),
                   trigger=rng.choice([400, 900, 1 << 30]),
                   fault_steps=rng.randrange(20, 120),
                   fault_rate=rng.choice([0.05, 0.15, 0.3]))

    def world(self) -> World:
        return World(n=self.n, rounds=self.rounds, trigger=self.trigger)

    def run(self) -> World:
        """The run the seed draws (raises ``SimFailure``)."""
        w = self.world()
        w.run(random.Random(self.seed), self.fault_steps, self.fault_rate)
        return w

    def replay(self, trace: list[Step]) -> World:
        """``trace``'s steps, then settled as the seed would (raises ``SimFailure``)."""
        w = self.world()
        w.replay(trace, random.Random(self.seed))
        return w

    def fails(self, trace: list[Step]) -> bool:
        try:
            self.replay(trace)
        except SimFailure:
            return True
        return False


def explain(seed: int) -> str:
    """What a failing seed did: its failure and a shortest run that still fails."""
    scenario = Scenario.of(seed)
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
