"""The link server's acknowledgement batch (``ack_batch``): the furthest position per
sender goes out once, and a position behind one already due changes nothing."""

from __future__ import annotations

from ambrosia_ic.coordinator.ack_batch import AckBatch


def test_the_furthest_position_per_sender_goes_out_once() -> None:
    batch = AckBatch()
    assert not batch.pending and batch.take() == {}
    batch.add({"a": 3, "b": 1})
    batch.add({"a": 5})
    batch.add({"a": 4, "b": 2})  # a's 4 is behind the 5 already due
    assert batch.pending
    assert batch.take() == {"a": 5, "b": 2}
    assert not batch.pending and batch.take() == {}
    batch.add({"a": 2})  # a new batch: no memory of what went out
    assert batch.take() == {"a": 2}
