"""The coordinator's deterministic core: what has been applied from each source stream
and what each sink has committed, with no I/O at all.

Every change is a function of a logged input (the handlers of ``ConnectorCoordinator``
call these methods with the input's arguments and its logged time), so a replay rebuilds
the same state byte for byte. The state is plain data (``to_state``/``from_state``), which
is what a checkpoint holds.

Exactly once, in short: a source message is applied only if its id is above its stream's
point of reference, which then moves to it, so a re-sent message is dropped; every
applied message's output is appended to each sink's pending bytes in apply order; the
pending bytes leave the state only when the sink voted yes on a transaction covering
them, which moves the committed offset. A transaction always starts at the committed
offset, at most one is in flight per sink, and a decision once recorded is what every
later Phase2 of that transaction says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ambrosia_services.staging import Ref, count_lines

from .records import (
    FROM_START,
    KEEP_DECIDED,
    Applied,
    Incoming,
    IncomingRef,
    Pending,
    SinkRecord,
    StagedRunError,
    StreamRecord,
)

__all__ = ["FROM_START", "KEEP_DECIDED", "Applied", "ConnectorCore", "Incoming", "IncomingRef",
           "Pending", "SinkRecord", "StagedRunError", "StreamRecord"]

class ConnectorCore:
    """The state, and every way an input changes it."""

    def __init__(self) -> None:
        self.instance = ""  # the instance name, for transaction ids
        self.streams: dict[int, StreamRecord] = {}
        self.sinks: dict[str, SinkRecord] = {}
        self.settings: dict[str, Any] = {"sinks": [], "interval_bytes": 64 * 1024,
                                         "interval_seconds": 0.5}
        # Staged segments referenced by the state: segment -> blocks held, and the
        # payload bytes they hold (the backlog: staged, not yet released).
        self.segments: dict[str, int] = {}
        self.backlog = 0

    # ------------------------------------------------------------ inputs
    def configure(self, settings: dict[str, Any], instance: str) -> None:
        """The decision-relevant part of the configuration (sinks, interval). A sink
        that leaves keeps its record (its offsets stay valid if it comes back)."""
        self.instance = instance
        self.settings = {"sinks": sorted(settings["sinks"]),
                         "interval_bytes": int(settings["interval_bytes"]),
                         "interval_seconds": float(settings["interval_seconds"])}
        for rec in self.sinks.values():
            rec.active = False
        for name in self.settings["sinks"]:
            self.sinks.setdefault(name, SinkRecord()).active = True

    def receive(self, batch: Iterable[Incoming]) -> list[tuple[int, list[Applied]]]:
        """Apply a batch: messages at or below their stream's point of reference are
        dropped. Returns the applied messages in order, as runs of one stream each."""
        runs: list[tuple[int, list[Applied]]] = []
        for stream_id, name, msg_id, event_time, key, payload in batch:
            rec = self.streams.get(stream_id)
            if rec is None:
                rec = self.streams[stream_id] = StreamRecord(name)
            if rec.por != FROM_START and msg_id <= rec.por:
                rec.dropped += 1
                continue
            rec.por = msg_id
            rec.applied += 1
            rec.lines += count_lines((payload,))
            rec.closed = False
            rec.name = name
            if not runs or runs[-1][0] != stream_id:
                runs.append((stream_id, []))
            runs[-1][1].append(Applied(stream_id, msg_id, event_time, key, payload))
        return runs

    def receive_staged(self, batch: Iterable[IncomingRef]) -> list[tuple[int, list[Ref]]]:
        """Apply a batch of staged runs: a run that ends at or below its stream's point of
        reference is a re-send and is dropped. Applied runs are held (``release`` lets
        them go). Returns them in order, as runs of one stream each.

        Raises:
            StagedRunError: a run straddles its stream's point of reference.
        """
        runs: list[tuple[int, list[Ref]]] = []
        for fields in batch:
            name, ref = fields[0], Ref.from_list(fields[1:])
            rec = self.streams.get(ref.stream_id)
            if rec is None:
                rec = self.streams[ref.stream_id] = StreamRecord(name)
            if rec.por != FROM_START and ref.first_id <= rec.por:
                if ref.last_id > rec.por:
                    raise StagedRunError(
                        f"stream {ref.stream_id}: a staged run of messages {ref.first_id}.."
                        f"{ref.last_id} straddles its point of reference {rec.por}")
                rec.dropped += ref.count
                continue
            rec.por = ref.last_id
            rec.applied += ref.count
            rec.lines += ref.lines
            rec.closed = False
            rec.name = name
            self._hold(ref)
            if not runs or runs[-1][0] != ref.stream_id:
                runs.append((ref.stream_id, []))
            runs[-1][1].append(ref)
        return runs

    def hold(self, refs: Iterable[Ref]) -> None:
        """Hold blocks once more (counted in the backlog, their segments kept) for a use
        of their own; each hold is let go by one ``release``."""
        for ref in refs:
            self._hold(ref)

    def _hold(self, ref: Ref) -> None:
        self.segments[ref.segment] = self.segments.get(ref.segment, 0) + 1
        self.backlog += ref.size

    def release(self, refs: Iterable[Ref]) -> None:
        """What ``refs`` hold is done with (committed everywhere): a segment no block of
        which is held any longer may be deleted."""
        for ref in refs:
            held = self.segments.get(ref.segment, 0) - 1
            if held > 0:
                self.segments[ref.segment] = held
            else:
                self.segments.pop(ref.segment, None)
            self.backlog -= ref.size

    def end_of_stream(self, stream_id: int) -> None:
        rec = self.streams.get(stream_id)
        if rec is not None:
            rec.closed = True

    def emit(self, sink: str, data: bytes, now_ns: int) -> None:
        """Append output for ``sink`` (from the output hook). Unknown or inactive sinks
        are a programming error in the hook, not bad input.

        Raises:
            KeyError: ``sink`` is not a configured sink.
        """
        rec = self.sinks.get(sink)
        if rec is None or not rec.active:
            raise KeyError(f"no configured sink {sink!r} (configured: "
                           f"{', '.join(self.settings['sinks']) or 'none'})")
        if not data:
            return
        if rec.uncut == 0:
            rec.uncut_since = now_ns
        rec.pending += data

    def emit_staged(self, sink: str, ref: Ref, now_ns: int) -> None:
        """Append a staged block's payloads to ``sink``'s output as they are; the block is
        held until the sink commits it.

        Raises:
            KeyError: ``sink`` is not a configured sink.
        """
        rec = self.sinks.get(sink)
        if rec is None or not rec.active:
            raise KeyError(f"no configured sink {sink!r} (configured: "
                           f"{', '.join(self.settings['sinks']) or 'none'})")
        if rec.uncut == 0:
            rec.uncut_since = now_ns
        rec.pending.add_ref(ref)
        self._hold(ref)

    def sink_uncommitted(self, sink: str, rtag: int, txn_ids: Sequence[str],
                         now_ns: int) -> None:
        """A sink listed the transactions it holds after Phase1 (on a new link): each is
        committed if it was decided so, aborted otherwise; a transaction in flight with
        no decision is aborted if the sink holds it (its bytes go into a new one), and
        kept if not (no Phase1 of it reached the sink: it is sent again as it is)."""
        rec = self.sinks.get(sink)
        if rec is None:
            return
        if rec.txn_id and rec.txn_id not in rec.decided and rec.txn_id in txn_ids:
            self._decide(rec, rec.txn_id, False)
        rec.settlement = [(t, rec.decided.get(t, False)) for t in txn_ids]
        rec.settled_rtag = rtag
        self._cut_due(sink, rec, now_ns, force=True)

    def sink_voted(self, sink: str, txn_id: str, commit: bool, now_ns: int) -> None:
        """The sink's vote on the transaction in flight is the decision; a vote on any
        other transaction is stale (already settled) and changes nothing."""
        rec = self.sinks.get(sink)
        if rec is None or not rec.txn_id or rec.txn_id != txn_id:
            return
        self._decide(rec, txn_id, commit)
        self._cut_due(sink, rec, now_ns, force=not commit)

    def tick(self, now_ns: int) -> None:
        """Cut a transaction for every sink whose uncut output is old enough."""
        for name, rec in self.sinks.items():
            self._cut_due(name, rec, now_ns, force=False)

    def flush(self, now_ns: int) -> None:
        """Cut a transaction now for every sink with uncut output and none in flight,
        whatever ``interval_bytes`` and ``interval_seconds`` say: for output that comes in
        units of its own (a pipeline's batches), which should not wait for a tick."""
        for name, rec in self.sinks.items():
            self._cut_due(name, rec, now_ns, force=True)

    def cut_due(self, now_ns: int) -> None:
        """After output was emitted: cut where enough bytes are pending."""
        self.tick(now_ns)

    # ------------------------------------------------------------ rules
    def _decide(self, rec: SinkRecord, txn_id: str, commit: bool) -> None:
        if commit:
            self.release(rec.pending.drop(rec.txn_end - rec.committed))
            rec.committed = rec.txn_end
            rec.commits += 1
        else:
            rec.aborts += 1
            if rec.uncut_since is None and rec.pending:
                rec.uncut_since = 0  # its bytes are uncut again, and overdue
        rec.decided[txn_id] = commit
        while len(rec.decided) > KEEP_DECIDED:
            del rec.decided[next(iter(rec.decided))]
        rec.txn_id = ""
        rec.txn_end = rec.committed

    def _due(self, rec: SinkRecord, now_ns: int, *, force: bool = False) -> bool:
        """The cut rule: a sink with uncut output and no transaction in flight cuts one
        when forced, when enough bytes wait, or when the oldest waited long enough."""
        if rec.txn_id or rec.uncut == 0:
            return False
        age = (now_ns - (rec.uncut_since or 0)) / 1e9
        return (force or rec.uncut >= self.settings["interval_bytes"]
                or age >= self.settings["interval_seconds"])

    def _cut_due(self, name: str, rec: SinkRecord, now_ns: int, *, force: bool) -> None:
        if self._due(rec, now_ns, force=force):
            rec.txn_count += 1
            rec.txn_id = f"{self.instance}-{name}-{rec.txn_count}"
            rec.txn_end = rec.committed + len(rec.pending)
            rec.uncut_since = None

    # ------------------------------------------------------------ queries
    def wants_tick(self, now_ns: int) -> bool:
        """Whether a ``tick`` at ``now_ns`` would cut a transaction: the primary's timer
        asks this (outside handlers, with its clock) and sends the Impulse only then."""
        return any(self._due(rec, now_ns) for rec in self.sinks.values())

    def status(self) -> dict[str, Any]:
        """Counters derived from the state alone (deterministic)."""
        return {
            "streams": {str(sid): {"name": r.name, "applied": r.applied, "dropped": r.dropped,
                                   "por": None if r.por == FROM_START else r.por,
                                   "closed": r.closed, "lines": r.lines}
                        for sid, r in sorted(self.streams.items())},
            "sinks": {name: {"committed": r.committed, "pending_bytes": len(r.pending),
                             "txn": r.txn_id or None, "commits": r.commits,
                             "aborts": r.aborts, "active": r.active}
                      for name, r in sorted(self.sinks.items())},
            "staged": {"segments": len(self.segments), "backlog_bytes": self.backlog},
        }

    # ------------------------------------------------------------ checkpoint
    def to_state(self) -> dict[str, Any]:
        """Plain data (lists, no int keys) for msgpack."""
        return {
            "instance": self.instance,
            "settings": dict(self.settings),
            "streams": [[sid, attrs.astuple(r)] for sid, r in self.streams.items()],
            "sinks": [[name, r.to_state()] for name, r in self.sinks.items()],
            "staged": [sorted(self.segments.items()), self.backlog],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ConnectorCore:
        core = cls()
        core.instance = state["instance"]
        core.settings = dict(state["settings"])
        core.settings["sinks"] = list(core.settings["sinks"])
        for sid, fields in state["streams"]:
            core.streams[sid] = StreamRecord(*fields)
        for name, fields in state["sinks"]:
            core.sinks[name] = SinkRecord.from_state(fields)
        segments, core.backlog = state.get("staged", ([], 0))
        core.segments = {name: n for name, n in segments}
        return core
