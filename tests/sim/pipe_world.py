"""A deterministic simulation of the pipeline's commit path: a source, the connector
coordinator and one or two 2PC file sinks, in one process, driven by one seeded scheduler
(the shape of ``world``: steps drawn from a seed, a trace, ``shrink``), so that a crash
between any two steps of a batch's life is tried.

What runs is the real code, in memory:

- the connector coordinator is the real immortal (``ConnectorCoordinator``: its handlers,
  ``ConnectorCore``, its ``on_become_primary`` and configuration) on the binding's real
  ``Engine``, driven by ``InMemoryCoordinator``: every Impulse is a logged record, a
  checkpoint is the engine's own, and a crash is a new engine recovering from the last
  checkpoint and the records logged after it, then becoming primary again (``pipe_coord``);
- its end of each sink connection is the real ``SinkSession`` (what ``sinks.SinkLink``
  runs), whose reports become the real ``sink_uncommitted`` and ``sink_voted`` Impulses;
- each sink is the real ``FileSinkStore`` answered by the real ``sinkanswer.answer``, as
  ``SinkServer`` serves it (``pipe_sink``).

What is simulated is only what moves bytes: the primary's I/O shell (``live.Live`` is
replaced by a stand-in that only hears which batches were applied, and this world sends
the Impulses the listener and the link would, and steps the sessions as the link does),
the source (each batch one MESSAGE of stream 1, one or two to a ``receive``; what is not
ACKed is sent again after the coordinator's crash, as a source reconnecting does; ACKs on
their way are lost with it), the connections (byte queues delivered in pieces, dropped,
their last bytes still arriving after the writer closed or died; a link's report to the
state, a listing or a vote, sent twice), the sinks' disk
(``pipe_disk``: at a crash unsynced writes are lost, kept or cut short, and a file created
since its directory's last sync is gone), and the crashes: of the coordinator at any step;
of a sink at any step, before any of its disk calls (during its recovery too) or right
after any of its store's durable steps.

The job table and its runners (``pipeline.jobtable``, ``jobs``) are not in this world:
``pipejobs_world`` extends it with them, the word count immortal in place of the
connector coordinator, the source's lines staged in segments, and the runners.

Checked after every logged input: a transaction's decision, once made, never changes.
Checked at the end of each run (faults stop, the world heals and runs until nothing is
left to do): each sink's committed output is every batch's payload exactly once, in order;
nothing is left prepared at a sink nor in flight at the coordinator; every COMMIT and
ABORT a sink logged is the coordinator's decision on that transaction; the totals (bytes
committed at both ends, lines and batches applied) equal the input; a new life replaying
the log from the checkpoint rebuilds the coordinator's state; and no sink's store refused
its own directory after a crash.
"""

from __future__ import annotations

import collections
import random
from pathlib import Path
from typing import Any

from ambrosia_services.connectors.clients import SinkStoreCorruptError
from ambrosia_services.connectors.clients.txnlog import TxnLogKind, decode_txnlog
from ambrosia_services.connectors.coordinator.immortal import ConnectorCoordinator
from ambrosia_services.connectors.coordinator.sink_session import SinkSession

from ambrosia_py.testing.inmemory import InMemoryCoordinator

from .pipe_coord import INSTANCE, Coordinator, SimLive, config
from .pipe_disk import SinkDisk
from .pipe_sink import COOKIE, MAX_FRAME, Conn, SinkCrash, SinkNode
from .world import SimFailure, Step

__all__ = ["PipeWorld"]

# The store's durable steps a sink may crash right after (``FileSinkStore.on_step``).
STORE_STEPS = ("pending-synced", "prepare-logged", "commit-logged", "commit-applied",
               "abort-logged")
_FAULTS = frozenset({"crash", "arm", "drop", "checkpoint", "again"})
SINKS = ("a", "b")


class PipeWorld:
    """The source, the coordinator, the sinks and the connections between them."""

    coordinator: type[Coordinator] = Coordinator  # one life of it
    faults = _FAULTS  # the kinds of steps that are faults

    def __init__(self, batches: int, lines: int, sinks: int, directory: Path) -> None:
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
        self.disk = SinkDisk()
        self.sinks = {name: SinkNode(directory / name, self.disk) for name in SINKS[:sinks]}
        self.config = config(list(self.sinks))
        self.coord: Coordinator | None = None
        self.conns: dict[int, Conn] = {}
        self.next_cid = 1
        self.trace: list[Step] = []
        self.counts: collections.Counter[str] = collections.Counter()

    # -- the coordinator's lives
    def _new_coordinator(self) -> Coordinator:
        coord = self.coordinator(self)
        self.coord = coord  # SimLive finds it while it becomes primary
        return coord

    def make_live(self, _owner: Any, _cfg: Any) -> SimLive:
        assert self.coord is not None
        self.coord.live = SimLive(self, self.coord.app)
        return self.coord.live

    def observe(self, app: ConnectorCoordinator) -> None:
        """A decision, once made, stays (checked after every logged input)."""
        for rec in app.core.sinks.values():
            for txn, commit in rec.decided.items():
                if self.decisions.setdefault(txn, commit) != commit:
                    self.fail(f"transaction {txn} decided {self.decisions[txn]} once, now "
                              f"{commit}")

    # -- the steps
    def steps(self, faults: bool) -> list[Step]:
        out: list[Step] = []
        coord = self.coord
        if coord is None:
            out.append(("restart", "coord"))
        else:
            if coord.ic.to_self:
                out.append(("log",))
            if self.acks:
                out.append(("ack",))
            if coord.live is not None and self.sent < len(self.payloads):
                out += [("send", 1), ("send", 2)]
            out += [("connect", name) for name, sink in self.sinks.items()
                    if name not in coord.conns and sink.store is not None]
            if faults:
                out += [("crash", "coord"), ("checkpoint",)]
                if coord.reported is not None:
                    out.append(("again",))
        for name, sink in self.sinks.items():
            if sink.store is None:
                out.append(("restart", name))
            elif faults:
                out += [("crash", name, k) for k in range(3)]
                out += [("arm", name, step) for step in STORE_STEPS]
        if faults:
            out += [("arm", "io", n) for n in (1, 2, 3, 5, 8)]
        for cid, conn in self.conns.items():
            if conn.to_sink and self.sinks[conn.sink].store is not None and not conn.sink_closed:
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
            self.counts[f"crash at {crashed}"] += 1
            if step[0] == "restart":
                self.counts["crash in a recovery"] += 1
            self._crash_sink(self._sink_of(step), len(self.trace))
        self._tidy()

    def _sink_of(self, step: Step) -> str:
        """The sink a step that crashed one was at."""
        return self.conns[step[1]].sink if step[0] == "c2s" else step[1]

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
                self.sinks[step[1]].start()
            except SinkStoreCorruptError as err:
                self.fail(f"sink {step[1]} refused its own directory after a crash: {err}")
        elif kind == "crash" and step[1] == "coord":
            assert coord is not None
            for name in list(coord.conns):
                coord.close_link(name)
            self.coord = None
            self.acks.clear()  # lost with the source's connection
            self.sent = min((k for k in range(len(self.payloads)) if k not in self.acked),
                            default=len(self.payloads))
        elif kind == "crash":
            self._crash_sink(step[1], step[2])
        elif kind == "arm" and step[1] == "io":
            self.disk.crash_in = step[2]
        elif kind == "arm":
            self.sinks[step[1]].crash_at = step[2]
        elif kind == "drop":
            self._forget(self.conns.pop(step[1]))
        elif kind == "again":  # a link's report delivered twice: handlers take it once
            assert coord is not None and coord.reported is not None
            coord.impulse(coord.reported[0], *coord.reported[1])
        elif kind == "checkpoint":
            assert coord is not None
            self.checkpoint = (coord.ic.take_checkpoint(), len(self.log))
        else:
            self._progress(step)
            if self.coord is not None:
                for name in self.sinks:
                    self.coord.link(name)

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
            session = SinkSession(step[1], INSTANCE, COOKIE.encode(), self.next_cid,
                                  max_frame_size=MAX_FRAME)
            coord.conns[step[1]] = self.conns[self.next_cid] = Conn.open(self.next_cid,
                                                                          session)
            self.next_cid += 1

    def _on_a_connection(self, step: Step) -> None:
        kind = step[0]
        if kind == "c2s":
            conn = self.conns[step[1]]
            n = max(1, int(len(conn.to_sink) * step[2]))
            data = bytes(conn.to_sink[:n])
            del conn.to_sink[:n]
            self.sinks[conn.sink].receive(conn, data)
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

    def _forget(self, conn: Conn) -> None:
        """``conn`` is gone at both ends (dropped, or its sink died)."""
        self.conns.pop(conn.cid, None)
        if self.coord is not None and self.coord.conns.get(conn.sink) is conn:
            del self.coord.conns[conn.sink]
        self.sinks[conn.sink].door.left(conn)

    def _crash_sink(self, name: str, k: int) -> None:
        for conn in list(self.conns.values()):
            if conn.sink == name:
                self._forget(conn)
        self.sinks[name].crash(random.Random(k * 7919 + len(self.trace)))

    def _tidy(self) -> None:
        """Connections both ends are done with go."""
        for cid, conn in list(self.conns.items()):
            if conn.session is None and (conn.sink_closed or not conn.to_sink):
                del self.conns[cid]

    # -- runs
    def run(self, rng: random.Random, fault_steps: int, fault_rate: float) -> None:
        for name in self.sinks:
            self.do(("restart", name))
        self.do(("restart", "coord"))
        for _ in range(fault_steps):
            every = self.steps(faults=True)
            progress = [s for s in every if s[0] not in self.faults]
            faults = [s for s in every if s[0] in self.faults]
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
        self.disk.crash_in = None
        for sink in self.sinks.values():
            sink.crash_at = None
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
        coord = self.coord
        assert coord is not None
        stream = coord.app.core.streams[1]
        lines = sum(p.count(b"\n") for p in self.payloads)
        if (stream.applied, stream.lines) != (len(self.payloads), lines):
            self.fail(f"applied {stream.applied} batches, {stream.lines} lines; the input: "
                      f"{len(self.payloads)} batches, {lines} lines")
        for name, sink in self.sinks.items():
            self.check_sink(name, sink, coord.app.core.sinks[name])
        self.check_replay()
        self.counts.update(self.disk.fates)

    def check_sink(self, name: str, sink: SinkNode, rec: Any) -> None:
        """``name`` committed every batch once, in order; nothing is in doubt; each of
        its decisions is the coordinator's."""
        store = sink.store
        assert store is not None
        got = (sink.directory / "committed").read_bytes()
        want = self.wanted_output(name, got)
        if got != want:
            self.fail(f"sink {name} committed {len(got)} bytes, not every batch once in "
                      f"order ({len(want)} bytes): {got[-60:]!r}")
        if store.prepared is not None or rec.txn_id:
            self.fail(f"sink {name} left in doubt: prepared {store.prepared}, in flight "
                      f"{rec.txn_id!r}")
        records, _ = decode_txnlog((sink.directory / "txnlog").read_bytes())
        for r in records:
            if r.kind is TxnLogKind.PREPARE:
                continue
            decided = self.decisions.get(r.txn_id)
            if decided is not (r.kind is TxnLogKind.COMMIT):
                self.fail(f"sink {name} logged {r.kind.name} of {r.txn_id}; the "
                          f"coordinator decided {decided}")
        if (rec.committed, store.committed_offset) != (len(want), len(want)):
            self.fail(f"sink {name}: committed {rec.committed} bytes at the coordinator, "
                      f"{store.committed_offset} at the sink; the input: {len(want)}")
        self.counts["commits"] += rec.commits
        self.counts["aborts"] += rec.aborts

    def wanted_output(self, _name: str, _got: bytes) -> bytes:
        """What a sink must have committed: every batch's payload once, in order."""
        return b"".join(self.payloads)

    def check_replay(self) -> None:
        """A new life replaying the log from the checkpoint rebuilds the same state."""
        assert self.coord is not None
        again = InMemoryCoordinator(self.coordinator.immortal, INSTANCE, config=self.config)
        data, position = self.checkpoint
        again.recover(data, self.log[position:], primary=False)
        if again.instance.checkpoint_state() != self.coord.app.checkpoint_state():
            self.fail("a replay of the log does not rebuild the coordinator's state")
