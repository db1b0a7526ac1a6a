"""A deterministic simulation of the pipeline's commit path: a source, the connector
coordinator and its 2PC file sink, in one process, driven by one seeded scheduler (the
shape of ``world``: steps drawn from a seed, a trace, ``shrink``), so that a crash between
any two steps of a batch's life is tried.

What runs is the real code, in memory:

- the connector coordinator is the real immortal (``ConnectorCoordinator``: its handlers,
  ``ConnectorCore``, its ``on_become_primary`` and configuration) on the binding's real
  ``Engine``, driven by ``InMemoryCoordinator``: every Impulse is a logged record, a
  checkpoint is the engine's own, and a crash is a new engine recovering from the last
  checkpoint and the records logged after it, then becoming primary again;
- its end of each sink connection is the real ``SinkSession`` (what ``sinks.SinkLink``
  runs), whose reports become the real ``sink_uncommitted`` and ``sink_voted`` Impulses;
- the sink is the real ``FileSinkStore`` answered by the real ``sinkanswer.answer``, as
  ``SinkServer`` serves it (``pipe_sink``).

What is simulated is only what moves bytes: the primary's I/O shell (``live.Live`` is
replaced by a stand-in that only hears which batches were applied, and this world sends
the Impulses the listener and the link would), the source (each batch one MESSAGE of
stream 1; what is not acknowledged is sent again after the coordinator's crash, as a
source reconnecting does), the connections (byte queues delivered in pieces, dropped,
their last bytes still arriving after the writer closed or died), the sink's disk
(``pipe_disk``: unsynced writes lost, kept, or cut short at a crash, a file created since
the directory's last sync gone), the crashes of the coordinator and of the sink (at any
step, or inside the store between two of its durable steps).

The job table and its runners (``pipeline.jobtable``, ``jobs``) are not in this world yet.

Checked after every logged input: a transaction's decision, once made, never changes.
Checked at the end of each run (faults stop, the world heals and runs until nothing is
left to do): the sink's committed output is every batch's payload exactly once, in order;
nothing is left prepared at the sink nor in flight at the coordinator; every PREPARE the
sink logged was settled by the coordinator's decision (COMMIT where it decided commit,
ABORT where it decided abort); the totals (bytes, lines, batches applied) equal the input;
and the sink's store never refused its own directory after a crash.
"""

from __future__ import annotations

import collections
import logging
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
from ambrosia_services.connectors.clients import SinkStoreCorruptError
from ambrosia_services.connectors.clients.txnlog import TxnLogKind, decode_txnlog
from ambrosia_services.connectors.coordinator import immortal as immortal_module
from ambrosia_services.connectors.coordinator.immortal import ConnectorCoordinator
from ambrosia_services.connectors.coordinator.sink_session import SinkSession

from ambrosia_py.testing.inmemory import InMemoryCoordinator

from .pipe_coord import CONFIG, INSTANCE, SINK, Coordinator, SimLive
from .pipe_disk import sink_disk
from .pipe_sink import COOKIE, MAX_FRAME, Conn, SinkCrash, SinkNode
from .world import SimFailure, Step, shrink

__all__ = ["PipeScenario", "PipeWorld", "explain"]

# The store's durable steps a sink may crash right after (``FileSinkStore.on_step``).
STORE_STEPS = ("pending-synced", "prepare-logged", "commit-logged", "commit-applied",
               "abort-logged")
_FAULTS = frozenset({"crash", "arm", "drop", "checkpoint"})
_DISK_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None


class PipeWorld:
    """The source, the coordinator, the sink and the connections between them."""

    def __init__(self, batches: int, lines: int, directory: Path) -> None:
        self.payloads = [b"".join(b"batch %d line %d\n" % (k, j)
                                  for j in range(1 + (k * 7 + lines) % (lines + 1)))
                         for k in range(batches)]
        self.log: list[bytes] = []
        self.checkpoint: tuple[bytes, int] = (b"", 0)
        self.acked: set[int] = set()  # the batches the source had ACKed
        self.acks: list[int] = []  # ACKs on their way to the source (tokens)
        self.sent = 0  # the source's next batch to send on its connection
        # Each ``receive`` sent: the first batch it carries and how many (its token is
        # its index); its ACK acks them all.
        self.tokens: list[tuple[int, int]] = []
        self.decisions: dict[str, bool] = {}
        self.sink = SinkNode(directory)
        self.coord: Coordinator | None = None
        self.conns: dict[int, Conn] = {}
        self.next_cid = 1
        self.trace: list[Step] = []
        self.counts: collections.Counter[str] = collections.Counter()

    # -- the coordinator's lives
    def _new_coordinator(self) -> Coordinator:
        coord = Coordinator(self)
        self.coord = coord  # SimLive finds it while it becomes primary
        return coord

    def make_live(self, _owner: Any, _cfg: Any) -> SimLive:
        assert self.coord is not None
        self.coord.live = SimLive(self, self.coord.app)
        return self.coord.live

    def observe(self, app: ConnectorCoordinator) -> None:
        """A decision, once made, stays (checked after every logged input)."""
        rec = app.core.sinks.get(SINK)
        if rec is None:
            return
        for txn, commit in rec.decided.items():
            if self.decisions.setdefault(txn, commit) != commit:
                self.fail(f"transaction {txn} decided {self.decisions[txn]} once, now {commit}")

    # -- the steps
    def steps(self, faults: bool) -> list[Step]:
        out: list[Step] = []
        coord, sink = self.coord, self.sink
        if coord is None:
            out.append(("restart", "coord"))
        else:
            if coord.ic.to_self:
                out.append(("log",))
            if self.acks:
                out.append(("ack",))
            if coord.live is not None and self.sent < len(self.payloads):
                out += [("send", 1), ("send", 2)]
            if coord.conn is None and sink.store is not None:
                out.append(("connect",))
            if faults:
                out += [("crash", "coord"), ("checkpoint",)]
        if sink.store is None:
            out.append(("restart", "sink"))
        elif faults:
            out += [("crash", "sink", k) for k in range(3)]
            out += [("arm", step) for step in STORE_STEPS]
            out += [("arm", "io", n) for n in (1, 2, 3, 5, 8)]
        for cid, conn in self.conns.items():
            if conn.to_sink and sink.store is not None and not conn.sink_closed:
                out += [("c2s", cid, 1.0), ("c2s", cid, 0.5)]
            if conn.session is not None and (conn.to_coord or
                                             (conn.sink_closed and not conn.eof_seen)):
                out += [("s2c", cid, 1.0), ("s2c", cid, 0.5)]
            if faults:
                out.append(("drop", cid))
        return out

    def do(self, step: Step) -> None:
        self.trace.append(step)
        self.counts[step[0]] += 1
        try:
            self._do(step)
        except SinkCrash as crashed:
            self.counts["crash inside the store"] += 1
            self.counts[f"crash at {crashed}"] += 1
            self._crash_sink(len(self.trace))
        self._tidy()

    def _do(self, step: Step) -> None:
        kind = step[0]
        coord = self.coord
        if kind == "restart" and step[1] == "coord":
            coord = self._new_coordinator()
            if self.log:
                self.counts["recovered"] += 1
                coord.recover()
            else:
                coord.first_start()
        elif kind == "restart":
            try:
                self.sink.start()
            except SinkStoreCorruptError as err:
                self.fail(f"the sink refused its own directory after a crash: {err}")
        elif kind == "crash" and step[1] == "coord":
            assert coord is not None
            coord.close_link()
            self.coord = None
            self.acks.clear()  # lost with the source's connection
            self.sent = min((k for k in range(len(self.payloads)) if k not in self.acked),
                            default=len(self.payloads))
        elif kind == "crash":
            self._crash_sink(step[2])
        elif kind == "arm" and step[1] == "io":
            self.sink.disk.crash_in = step[2]
        elif kind == "arm":
            self.sink.crash_at = step[1]
        elif kind == "drop":
            conn = self.conns.pop(step[1])
            if coord is not None and coord.conn is conn:
                coord.conn = None
            if self.sink.served is conn:
                self.sink.served = None
        elif kind == "checkpoint":
            assert coord is not None
            self.checkpoint = (coord.ic.take_checkpoint(), len(self.log))
        else:
            self._progress(step)
            if self.coord is not None:
                self.coord.link()

    def _progress(self, step: Step) -> None:
        kind = step[0]
        if kind == "ack":
            first, n = self.tokens[self.acks.pop(0)]
            self.acked.update(range(first, first + n))
        elif kind in ("log", "send", "connect"):
            assert self.coord is not None
            self._at_coordinator(self.coord, step)
        else:
            self._on_a_connection(step)

    def _at_coordinator(self, coord: Coordinator, step: Step) -> None:
        kind = step[0]
        if kind == "log":
            coord.log_one()
        elif kind == "send":
            batch = [(1, "src", k + 1, 0, b"", self.payloads[k])
                     for k in range(self.sent, min(self.sent + step[1], len(self.payloads)))]
            self.tokens.append((self.sent, len(batch)))  # its ACK acks them all
            coord.impulse("receive", len(self.tokens) - 1, batch)
            self.sent += len(batch)
        elif kind == "connect":
            session = SinkSession(SINK, INSTANCE, COOKIE.encode(), self.next_cid,
                                  max_frame_size=MAX_FRAME)
            coord.conn = self.conns[self.next_cid] = Conn.open(self.next_cid, session)
            self.next_cid += 1

    def _on_a_connection(self, step: Step) -> None:
        kind = step[0]
        if kind == "c2s":
            conn = self.conns[step[1]]
            n = max(1, int(len(conn.to_sink) * step[2]))
            data = bytes(conn.to_sink[:n])
            del conn.to_sink[:n]
            self.sink.receive(conn, data)
        elif kind == "s2c":
            conn = self.conns[step[1]]
            assert conn.session is not None
            if conn.to_coord:
                n = max(1, int(len(conn.to_coord) * step[2]))
                conn.session.receive_data(bytes(conn.to_coord[:n]))
                del conn.to_coord[:n]
            else:
                conn.eof_seen = True
                conn.session.receive_data(b"")

    def _crash_sink(self, k: int) -> None:
        for conn in list(self.conns.values()):
            self.conns.pop(conn.cid)
            if self.coord is not None and self.coord.conn is conn:
                self.coord.conn = None
        self.sink.crash(random.Random(k * 7919 + len(self.trace)))

    def _tidy(self) -> None:
        """Connections both ends are done with go."""
        for cid, conn in list(self.conns.items()):
            if conn.session is None and (conn.sink_closed or not conn.to_sink):
                del self.conns[cid]

    # -- runs
    def run(self, rng: random.Random, fault_steps: int, fault_rate: float) -> None:
        self.do(("restart", "sink"))
        self.do(("restart", "coord"))
        for _ in range(fault_steps):
            every = self.steps(faults=True)
            progress = [s for s in every if s[0] not in _FAULTS]
            faults = [s for s in every if s[0] in _FAULTS]
            if faults and (not progress or rng.random() < fault_rate):
                kind = rng.choice(sorted({f[0] for f in faults}))
                self.do(rng.choice([f for f in faults if f[0] == kind]))
            elif progress:
                self.do(rng.choice(progress))
        self.settle(rng)

    def replay(self, trace: list[Step], rng: random.Random) -> None:
        for step in trace:
            if step in self.steps(faults=True):
                self.do(step)
        self.settle(rng)

    def settle(self, rng: random.Random, end_steps: int = 5000) -> None:
        self.sink.crash_at = self.sink.disk.crash_in = None
        for _ in range(end_steps):
            progress = self.steps(faults=False)
            if not progress:
                self.check_end()
                return
            self.do(rng.choice(progress))
        self.fail(f"no end after {end_steps} steps without faults")

    def fail(self, message: str) -> None:
        raise SimFailure(message, list(self.trace))

    # -- the outcome
    def check_end(self) -> None:
        coord, store = self.coord, self.sink.store
        assert coord is not None and store is not None
        want = b"".join(self.payloads)
        got = (self.sink.directory / "committed").read_bytes()
        if got != want:
            self.fail(f"the sink committed {len(got)} bytes, not every batch once in "
                      f"order ({len(want)} bytes): {got[-60:]!r}")
        rec = coord.app.core.sinks[SINK]
        if store.prepared is not None or rec.txn_id:
            self.fail(f"left in doubt: prepared {store.prepared}, in flight {rec.txn_id!r}")
        records, _ = decode_txnlog((self.sink.directory / "txnlog").read_bytes())
        for r in records:
            if r.kind is TxnLogKind.PREPARE:
                continue
            decided = self.decisions.get(r.txn_id)
            if decided is not (r.kind is TxnLogKind.COMMIT):
                self.fail(f"the sink logged {r.kind.name} of {r.txn_id}; the coordinator "
                          f"decided {decided}")
        stream = coord.app.core.streams[1]
        lines = sum(p.count(b"\n") for p in self.payloads)
        if (rec.committed, store.committed_offset, stream.applied, stream.lines) != (
                len(want), len(want), len(self.payloads), lines):
            self.fail(f"totals: committed {rec.committed}/{store.committed_offset} bytes, "
                      f"{stream.applied} batches, {stream.lines} lines; the input: "
                      f"{len(want)} bytes, {len(self.payloads)} batches, {lines} lines")
        self.check_replay()
        self.counts.update(self.sink.disk.fates)
        self.counts["commits"] += rec.commits
        self.counts["aborts"] += rec.aborts

    def check_replay(self) -> None:
        """A new life replaying the log from the checkpoint rebuilds the same state."""
        assert self.coord is not None
        again = InMemoryCoordinator(ConnectorCoordinator, INSTANCE, config=CONFIG)
        data, position = self.checkpoint
        again.recover(data, self.log[position:], primary=False)
        if again.instance.core.to_state() != self.coord.app.core.to_state():
            self.fail("a replay of the log does not rebuild the coordinator's state")


@attrs.frozen
class PipeScenario:
    """One run's parameters, drawn from its seed."""

    seed: int
    batches: int
    lines: int
    fault_steps: int
    fault_rate: float

    @classmethod
    def of(cls, seed: int) -> PipeScenario:
        rng = random.Random(seed ^ 0x5EED)
        return cls(seed, batches=rng.randrange(2, 7), lines=rng.randrange(1, 4),
                   fault_steps=rng.randrange(20, 100),
                   fault_rate=rng.choice([0.05, 0.15, 0.3]))

    def _world(self, go: Any) -> PipeWorld:
        directory = Path(tempfile.mkdtemp(prefix="pipesim.", dir=_DISK_ROOT))
        world = PipeWorld(self.batches, self.lines, directory)
        saved, quiet = immortal_module.Live, logging.root.manager.disable
        immortal_module.Live = world.make_live  # type: ignore[assignment,misc]
        logging.disable(logging.CRITICAL)  # the sink's and coordinator's lines: expected
        try:
            with sink_disk(world.sink.disk):
                go(world, random.Random(self.seed))
            return world
        finally:
            immortal_module.Live = saved  # type: ignore[misc]
            logging.disable(quiet)
            shutil.rmtree(directory, ignore_errors=True)

    def run(self) -> PipeWorld:
        """The run the seed draws (raises ``SimFailure``)."""
        return self._world(lambda w, rng: w.run(rng, self.fault_steps, self.fault_rate))

    def replay(self, trace: list[Step]) -> PipeWorld:
        return self._world(lambda w, rng: w.replay(trace, rng))

    def fails(self, trace: list[Step]) -> bool:
        try:
            self.replay(trace)
        except SimFailure:
            return True
        return False


def explain(seed: int) -> str:
    """What a failing seed did: its failure and a shortest run that still fails."""
    scenario = PipeScenario.of(seed)
    try:
        scenario.run()
    except SimFailure as err:
        short = shrink(err.trace, scenario.fails)
        steps = "\n".join(f"  {i:4d} {step}" for i, step in enumerate(short))
        return (f"seed {seed} ({scenario}) failed: {err}\n"
                f"a shortest run found ({len(short)} of {len(err.trace)} steps):\n{steps}")
    return f"seed {seed} passes"
