"""The group-commit rule without I/O: records hold every waiting input once and in
order, and nothing goes out (no delivery, no acknowledgement, no position) before a
record is made durable."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator.group_commit import GroupCommit, PendingInput
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.wire import HEADER_SIZE


def test_a_record_packs_what_waits_and_durable_lets_it_go() -> None:
    g = GroupCommit(cid=7)
    g.next_seq, g.inputs = 4, {"A": 2}
    g.pending.extend([("A", 3, b"a3"), (None, None, b"imp"), ("self", 9, b"s9"),
                      ("B", 1, b"b1")])
    record = g.take(max_bytes=1 << 20, epoch=None)
    assert (record.seq_id, record.senders) == (4, frozenset({"A", "self", "B"}))
    assert record.inputs == {"A": 3, "self": 9, "B": 1}
    assert record.wire.endswith(b"a3imps9b1") and not g.pending
    assert (g.next_seq, g.inputs) == (4, {"A": 2})  # nothing moves before it is durable
    out = g.durable(record, own_name="self")
    assert out.wire == record.wire and out.acks == {"A": 3, "B": 1}  # never ourselves
    assert (g.next_seq, g.inputs) == (5, {"A": 3, "self": 9, "B": 1})
    with pytest.raises(ValueError, match="record 4 made durable while the next is 5"):
        g.durable(record, own_name="self")  # twice: refused


def test_a_record_is_cut_at_its_size_and_the_rest_waits_in_order() -> None:
    g = GroupCommit(cid=1)
    g.pending.extend([("A", n, bytes([n]) * 10) for n in range(1, 6)])
    first = g.take(max_bytes=25)  # 3 inputs reach 25 bytes
    assert first.inputs == {"A": 3} and [s for _, s, _ in g.pending] == [4, 5]
    g.durable(first, "me")
    second = g.take(max_bytes=25)
    assert (second.seq_id, second.inputs) == (1, {"A": 5})


inputs = st.lists(st.tuples(st.sampled_from(["A", "B", None]), st.binary(min_size=1,
                                                                          max_size=30)),
                  max_size=60)


@settings(max_examples=200, deadline=None)
@given(inputs, st.lists(st.tuples(st.integers(1, 80), st.booleans()), max_size=40))
def test_every_input_is_in_exactly_one_durable_record_in_order(
        arrivals: list[tuple[str | None, bytes]], commits: list[tuple[int, bool]]) -> None:
    """Inputs arrive; records are taken at random sizes; a write may fail (the record is
    never made durable; the coordinator stops there). What went out holds the inputs in
    arrival order, each once, in records numbered 0, 1, ...; the log's position is
    exactly what those records hold; each acknowledgement names a position they hold
    and never goes back."""
    g = GroupCommit(cid=3)
    numbered: dict[str, int] = {}
    queued: list[PendingInput] = []
    for key, body in arrivals:
        if key is None:
            queued.append((None, None, body))
        else:
            numbered[key] = numbered.get(key, 0) + 1
            queued.append((key, numbered[key], body))
    g.pending.extend(queued)
    delivered = b""
    acked: dict[str, int] = {}
    records = 0
    for size, fails in commits:
        if not g.pending:
            break
        record = g.take(max_bytes=size)
        if fails:
            break
        out = g.durable(record, own_name="B")
        assert record.seq_id == records
        records += 1
        delivered += out.wire[HEADER_SIZE:]
        for sender, pos in out.acks.items():
            assert sender != "B" and pos >= acked.get(sender, 0)
            acked[sender] = pos
    everything = b"".join(body for _, _, body in queued)
    assert delivered == everything[:len(delivered)]  # in order, none twice, none skipped
    n = 0  # the inputs wholly delivered
    size = 0
    while n < len(queued) and size + len(queued[n][2]) <= len(delivered):
        size += len(queued[n][2])
        n += 1
    assert size == len(delivered)  # records hold whole inputs
    held: dict[str, int] = {}
    for key, seq, _ in queued[:n]:
        if key is not None and seq is not None:
            held[key] = seq
    assert (g.next_seq, g.inputs) == (records, held)
    assert all(pos <= held[s] for s, pos in acked.items())
