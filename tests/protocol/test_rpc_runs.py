"""``next_rpcs``: runs of incoming RPCs in one call, against ``next_event`` one at a time.

The same random conversations as ``test_random_flows`` (and damaged ones) are read twice:
with ``next_event`` alone, and with ``next_rpcs`` first whenever it has something (as the
engine reads them). Both must see the same RPCs with the same flags, in the same order
among the other events, produce the same bytes, end in the same state with the same count
of replayed messages, and fail with the same typed error at the same point.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.wire import NEED_DATA, BecomingPrimary, Rpc, TakeCheckpoint
from ambrosia_py.protocol import (
    BindingConnection,
    CheckpointLoadChunk,
    IncomingRpc,
    RecoveryComplete,
    State,
)
from tests import strategies as s

from .helpers import checkpoint, control, data, split_at
from .test_random_flows import NAME, Model, conversations, perform


def read(model: Model, pieces: list[bytes], runs: bool) -> tuple[Any, ...]:
    """Everything observable: events (an RPC as (rpc, is_replay)), flags, output, end."""
    c = BindingConnection(NAME)
    seen: list[Any] = []
    out = bytearray()
    done = 0
    error = None

    def after_event() -> None:
        nonlocal done, out
        done += 1
        for action in model.actions.get(done, []):
            out += perform(c, action)

    try:
        for piece in pieces:
            c.receive_data(piece)
            while True:
                if runs:
                    rpcs = c.next_rpcs()
                    if rpcs:
                        assert all(type(r) is Rpc for r in rpcs)
                        for r in rpcs:
                            seen.append(((r, c.is_replaying), (c.is_primary, c.is_replaying)))
                            after_event()
                        continue
                ev = c.next_event()
                if ev is NEED_DATA:
                    break
                if isinstance(ev, CheckpointLoadChunk):
                    seen.append((ev.data, None))
                    continue
                key = (ev.rpc, ev.is_replay) if isinstance(ev, IncomingRpc) else ev
                seen.append((key, (c.is_primary, c.is_replaying)))
                after_event()
    except RemoteProtocolError as err:
        error = (type(err), str(err))
    chunks = b"".join(x for x, fl in seen if fl is None)
    events = [x for x in seen if x[1] is not None]
    return events, chunks, bytes(out), c.state, c.messages_replayed, c.last_seq_id, error


@settings(max_examples=150, deadline=None)
@given(conversations(), st.data())
def test_runs_read_what_events_read(model: Model, d: st.DataObject) -> None:
    stream = model.stream()
    cuts = d.draw(st.lists(st.integers(0, len(stream)), max_size=10), label="cuts")
    pieces = split_at(stream, cuts)
    assert read(model, pieces, True) == read(model, pieces, False)


@settings(max_examples=150, deadline=None)
@given(conversations(), st.data())
def test_runs_fail_as_events_fail(model: Model, d: st.DataObject) -> None:
    stream = d.draw(s.mutations(model.stream()), label="damaged")
    cuts = d.draw(st.lists(st.integers(0, len(stream)), max_size=4), label="cuts")
    pieces = split_at(stream, cuts)
    assert read(model, pieces, True) == read(model, pieces, False)


def _recovering(*records: bytes) -> BindingConnection:
    c = BindingConnection(NAME)
    c.receive_data(checkpoint(b"state") + b"".join(records))
    while (ev := c.next_event()) is not NEED_DATA:
        if isinstance(ev, IncomingRpc):
            break
    return c


def test_a_run_stops_before_the_first_other_message_and_counts_what_it_replayed() -> None:
    rpcs = [Rpc(7, 1, bytes([i])) for i in range(6)]
    c = _recovering(data(0, rpcs[0]), data(1, rpcs[1], rpcs[2]),
                    data(2, rpcs[3], rpcs[4]) + control(TakeCheckpoint()) + data(3, rpcs[5]))
    assert c.state is State.RECOVERING and c.messages_replayed == 1
    assert c.next_rpcs() == rpcs[1:5]
    assert c.messages_replayed == 5 and c.last_seq_id == 2
    assert c.next_rpcs() == []  # a TakeCheckpoint is next: that is next_event's
    assert c.next_event() is not NEED_DATA
    assert c.state is State.SECONDARY_CHECKPOINT
    assert c.next_rpcs() == []  # a checkpoint is owed: nothing is dispatched


def test_a_run_ends_at_recovery_complete() -> None:
    c = _recovering(data(0, Rpc(1, 1, b"a")), data(1, Rpc(1, 1, b"b")),
                    control(BecomingPrimary()))
    assert c.next_rpcs() == [Rpc(1, 1, b"b")]
    assert c.next_rpcs() == []
    assert c.next_event() == RecoveryComplete(2)


def test_the_rpcs_before_a_damaged_record_come_first_then_its_error() -> None:
    good = data(1, Rpc(1, 1, b"b"))
    bad = bytearray(data(2, Rpc(1, 1, b"c")))
    bad[-1] ^= 0xFF  # the check bytes no longer match
    c = _recovering(data(0, Rpc(1, 1, b"a")), good, bytes(bad))
    assert c.next_rpcs() == [Rpc(1, 1, b"b")]
    try:
        c.next_rpcs()
    except RemoteProtocolError as err:
        assert "check bytes" in str(err) and err.seq_id == 2
    else:
        raise AssertionError("the damaged record was accepted")
    assert c.state is State.ERROR
