"""The coordinator's core alone, no I/O: under any interleaving of re-sent batches, votes
yes and no, lost Phase2s and reconnect settlements, a sink that keeps 2PC sink rules ends
up with every applied payload exactly once, in order; the same inputs replayed (from the
start, or through a checkpoint) give byte-identical state."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from ambrosia_services.connectors.coordinator.core import FROM_START, ConnectorCore
from hypothesis import given, settings
from hypothesis import strategies as st

SINKS = ["a", "b"]
SETTINGS = {"sinks": SINKS, "interval_bytes": 40, "interval_seconds": 1.0}


class Sink:
    """A 2PC sink in memory, with its rules: Phase1 must start at the committed offset;
    abort drops the prepared bytes; transactions after Phase1 are listed on reconnect."""

    def __init__(self) -> None:
        self.committed = b""
        self.prepared: tuple[str, bytes] | None = None
        self.voted = False

    def phase1(self, txn: str, start: int, data: bytes) -> None:
        assert start == len(self.committed), "a Phase1 must start at the committed offset"
        assert self.prepared is None
        self.prepared = (txn, data)

    def phase2(self, txn: str, commit: bool) -> None:
        if self.prepared is None or self.prepared[0] != txn:
            return
        if commit:
            self.committed += self.prepared[1]
        self.prepared = None


class Harness:
    """Drives a core the way the transports would, recording every input."""

    def __init__(self) -> None:
        self.core = ConnectorCore()
        self.inputs: list[tuple[str, tuple[Any, ...]]] = []
        self.sinks = {s: Sink() for s in SINKS}
        self.next_id: dict[int, int] = {}
        self.now = 0
        self.rtag = 0
        self.apply("configure", SETTINGS, "me")

    def apply(self, method: str, *args: Any) -> None:
        self.inputs.append((method, args))
        call(self.core, method, args)

    def step(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        self.now += 10**8
        if kind == "recv":
            _, stream, count, back = action
            nxt = self.next_id.get(stream, 0)
            ids = range(max(nxt - back, 0), nxt + count)
            self.next_id[stream] = nxt + count
            self.apply("receive", [(stream, f"s{stream}", i, 0, b"", b"%d:%d;" % (stream, i))
                                   for i in ids], self.now)
        elif kind == "tick":
            self.apply("tick", self.now)
        elif kind == "phase1":
            name, sink = action[1], self.sinks[action[1]]
            rec = self.core.sinks[name]
            if rec.txn_id and sink.prepared is None and not sink.voted:
                sink.phase1(rec.txn_id, rec.committed, b"".join(rec.txn_parts()))  # type: ignore[arg-type]
        elif kind == "vote":
            _, name, yes = action
            sink = self.sinks[name]
            if sink.prepared is not None and not sink.voted:
                sink.voted = True
                self.apply("sink_voted", name, sink.prepared[0], yes, self.now)
        elif kind == "phase2":
            name, sink = action[1], self.sinks[action[1]]
            if sink.prepared is not None and sink.voted:
                decided = self.core.sinks[name].decided.get(sink.prepared[0])
                if decided is not None:
                    sink.phase2(sink.prepared[0], decided)
                    sink.voted = False
        elif kind == "reconnect":
            self.reconnect(action[1])

    def reconnect(self, name: str) -> None:
        sink = self.sinks[name]
        sink.voted = False
        self.rtag += 1
        listed = [sink.prepared[0]] if sink.prepared else []
        self.apply("sink_uncommitted", name, self.rtag, listed, self.now)
        rec = self.core.sinks[name]
        assert rec.settled_rtag == self.rtag
        for txn, commit in rec.settlement:
            sink.phase2(txn, commit)

    def drain(self) -> None:
        """Everything settles: reconnect, then commit every transaction."""
        for name in SINKS:
            self.reconnect(name)
            for _ in range(100):
                self.now += 10**10
                self.apply("tick", self.now)
                rec = self.core.sinks[name]
                if not rec.txn_id:
                    break
                self.step(("phase1", name))
                self.step(("vote", name, True))
                self.step(("phase2", name))
            assert not self.core.sinks[name].pending


def call(core: ConnectorCore, method: str, args: tuple[Any, ...]) -> None:
    if method == "configure":
        core.configure(*args)
    elif method == "receive":
        batch, now = args
        for _, messages in core.receive(batch):
            for name in SINKS:
                core.emit(name, b"".join(m.payload for m in messages), now)
        core.cut_due(now)
    else:
        getattr(core, method)(*args)


def state_bytes(core: ConnectorCore) -> bytes:
    return msgpack.packb(core.to_state(), use_bin_type=True)


actions = st.one_of(
    st.tuples(st.just("recv"), st.integers(1, 3), st.integers(0, 6), st.integers(0, 5)),
    st.tuples(st.just("tick")),
    st.tuples(st.just("phase1"), st.sampled_from(SINKS)),
    st.tuples(st.just("vote"), st.sampled_from(SINKS), st.booleans()),
    st.tuples(st.just("phase2"), st.sampled_from(SINKS)),
    st.tuples(st.just("reconnect"), st.sampled_from(SINKS)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(actions, max_size=60), st.data())
def test_committed_output_is_every_message_once_in_order(steps: list[Any],
                                                        data: st.DataObject) -> None:
    h = Harness()
    cut = data.draw(st.integers(0, len(steps)))
    for action in steps[:cut]:
        h.step(action)
    # A checkpoint here, loaded by a new life that is then given the same inputs.
    checkpoint = msgpack.unpackb(state_bytes(h.core), raw=False, strict_map_key=False)
    resumed = ConnectorCore.from_state(checkpoint)
    assert state_bytes(resumed) == state_bytes(h.core)
    mark = len(h.inputs)
    for action in steps[cut:]:
        h.step(action)
    h.drain()
    for name in SINKS:
        out = h.sinks[name].committed.split(b";")[:-1]
        per_stream: dict[int, list[int]] = {}
        for item in out:
            s, i = map(int, item.split(b":"))
            per_stream.setdefault(s, []).append(i)
        assert per_stream == {s: list(range(n)) for s, n in h.next_id.items() if n}
        assert h.core.sinks[name].committed == len(h.sinks[name].committed)
    # Replays: from the start, and from the checkpoint, give the same state.
    again = ConnectorCore()
    for method, args in h.inputs:
        call(again, method, args)
    assert state_bytes(again) == state_bytes(h.core)
    for method, args in h.inputs[mark:]:
        call(resumed, method, args)
    assert state_bytes(resumed) == state_bytes(h.core)


def test_resent_messages_are_dropped_and_the_point_of_reference_moves() -> None:
    core = ConnectorCore()
    core.configure(SETTINGS, "me")
    runs = core.receive([(7, "s", 5, 0, b"", b"x"), (7, "s", 5, 0, b"", b"x"),
                         (7, "s", 3, 0, b"", b"y"), (7, "s", 9, 0, b"", b"z")])
    assert [[m.message_id for m in ms] for _, ms in runs] == [[5, 9]]
    rec = core.streams[7]
    assert (rec.por, rec.applied, rec.dropped) == (9, 2, 2)
    assert core.streams.get(8) is None
    core.end_of_stream(7)
    assert core.streams[7].closed
    core.receive([(7, "s", 10, 0, b"", b"w")])
    assert not core.streams[7].closed
    assert FROM_START == 2**64 - 1


def test_a_vote_no_keeps_the_bytes_for_a_new_transaction() -> None:
    core = ConnectorCore()
    core.configure({"sinks": ["a"], "interval_bytes": 4, "interval_seconds": 1.0}, "me")
    core.emit("a", b"hello", 0)
    core.cut_due(0)
    rec = core.sinks["a"]
    assert (rec.txn_id, rec.txn_end) == ("me-a-1", 5)
    core.sink_voted("a", "me-a-1", False, 1)
    assert (rec.txn_id, rec.txn_end, rec.committed, bytes(rec.pending)) == (
        "me-a-2", 5, 0, b"hello")
    core.sink_voted("a", "me-a-1", True, 2)  # stale: changes nothing
    assert rec.committed == 0
    core.sink_voted("a", "me-a-2", True, 3)
    assert (rec.committed, bytes(rec.pending), rec.commits, rec.aborts) == (5, b"", 1, 1)


def test_emit_to_an_unknown_sink_names_the_configured_ones() -> None:
    core = ConnectorCore()
    core.configure(SETTINGS, "me")
    with pytest.raises(KeyError, match="configured: a, b"):
        core.emit("nope", b"x", 0)


def test_pending_output_mixes_bytes_and_staged_blocks_and_commits_them_in_order() -> None:
    from ambrosia_services.connectors.coordinator.core import Pending
    from ambrosia_services.staging import Ref

    a = Ref(1, 1, 2, 2, 10, "i.x-1.seg", 8, 70, 123, 2)
    b = Ref(1, 3, 3, 1, 5, "i.x-1.seg", 78, 50, 456, 1)
    pending = Pending()
    pending += b"ab"
    pending.add_ref(a)
    pending += b"cd"
    pending += b"e"
    pending.add_ref(b)
    assert len(pending) == 2 + 10 + 3 + 5
    assert pending.parts(13) == [b"ab", a, b"c"]  # a bytes piece may be cut
    with pytest.raises(TypeError, match="staged blocks"):
        bytes(pending)
    again = Pending.from_state(pending.to_state())
    assert again.to_state() == pending.to_state() and len(again) == len(pending)
    assert bytes(Pending.from_state(b"old")) == b"old"  # a checkpoint from before blocks
    assert pending.drop(13) == [a]
    assert pending.parts(len(pending)) == [b"de", b] and len(pending) == 7
    with pytest.raises(ValueError, match="in part"):
        pending.drop(4)  # into the block
    assert pending.drop(7) == [b] and len(pending) == 0 and not pending


def test_staged_output_holds_its_blocks_until_the_sink_commits_them() -> None:
    from ambrosia_services.staging import Ref

    core = ConnectorCore()
    core.configure({"sinks": ["s"], "interval_bytes": 1, "interval_seconds": 1.0}, "i")
    run = [["five", *Ref(5, 1, 2, 2, 10, "i.x-1.seg", 8, 70, 1, 2).to_list()]]
    ((_sid, refs),) = core.receive_staged(run)
    core.emit_staged("s", refs[0], 0)
    core.release(refs)  # the receive's own hold: the sink's remains
    assert core.segments == {"i.x-1.seg": 1} and core.backlog == 10
    core.tick(1)
    rec = core.sinks["s"]
    assert rec.txn_parts() == [refs[0]]
    core.sink_voted("s", rec.txn_id, True, 2)
    assert core.segments == {} and core.backlog == 0 and rec.committed == 10


def test_a_tick_is_wanted_exactly_when_it_would_cut() -> None:
    """The primary's timer asks the core (``wants_tick``) rather than keeping a copy of the
    cut rule: whenever it says yes a tick cuts a transaction, and whenever it says no a
    tick changes nothing."""
    core = ConnectorCore()
    core.configure({"sinks": ["s", "t"], "interval_bytes": 100, "interval_seconds": 1.0}, "i")
    assert not core.wants_tick(10**12)  # nothing emitted
    core.emit("s", b"x" * 10, 5 * 10**9)
    for now, wanted in ((5 * 10**9, False), (6 * 10**9 - 1, False), (6 * 10**9, True)):
        assert core.wants_tick(now) is wanted
        before = core.to_state()
        probe = ConnectorCore.from_state(before)
        probe.tick(now)
        assert (probe.to_state() != before) is wanted
    core.tick(6 * 10**9)
    assert core.sinks["s"].txn_id == "i-s-1"
    core.emit("s", b"y", 7 * 10**9)
    assert not core.wants_tick(10**12)  # a transaction is in flight: no second cut
    core.emit("t", b"z", 7 * 10**9)
    assert core.wants_tick(8 * 10**9)  # but the other sink's output is old enough
