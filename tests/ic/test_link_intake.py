"""The link server's rule for numbered records, without sockets: every call of a sender
taken exactly once and in order, whatever it sends again after reconnections."""

from __future__ import annotations

import pytest
from ambrosia_ic.coordinator.intake import LinkIntake
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import UnexpectedMessageError
from ambrosia_core.wire import Rpc


def _calls(first: int, last: int) -> bytes:
    """The incoming-form frames of calls ``first``..``last`` (call n carries n)."""
    return b"".join(Rpc(7, 1, n.to_bytes(4, "little")).encode() for n in range(first, last + 1))


def test_a_record_is_taken_whole_in_part_or_not_at_all() -> None:
    intake = LinkIntake(lambda sender: {"A": 2}.get(sender, 0))
    assert intake.position("A") == 2 and intake.position("B") == 0
    assert intake.take("A", 2, 2, _calls(1, 2)) is None  # logged before: nothing new
    assert intake.take("A", 5, 4, _calls(2, 5)) == _calls(3, 5)  # 2 again, 3..5 new
    assert intake.take("A", 6, 1, _calls(6, 6)) == _calls(6, 6)
    assert intake.take("B", 1, 1, _calls(1, 1)) == _calls(1, 1)  # senders apart
    with pytest.raises(UnexpectedMessageError, match=r"link calls 8\.\.9 from A after 6"):
        intake.take("A", 9, 2, _calls(8, 9))
    assert intake.position("A") == 6  # a refused record takes nothing


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_whatever_is_sent_again_every_call_is_taken_once_in_order(data: st.DataObject) -> None:
    """A sender sends runs of calls; after a reconnection it starts again anywhere from
    the last position it was told (acknowledged: at most what was taken) or later calls
    it had sent. Whatever the runs, the frames taken are calls 1..n, each once."""
    logged = data.draw(st.integers(0, 5), label="logged at the start")
    intake = LinkIntake(lambda _sender: logged)
    taken = b""
    position = logged  # what the receiver has taken
    sent_up_to = logged
    for _ in range(data.draw(st.integers(1, 30), label="records")):
        start = data.draw(st.integers(max(1, position - 10), position + 1), label="first")
        end = data.draw(st.integers(start, start + 6), label="last")
        got = intake.take("A", end, end - start + 1, _calls(start, end))
        if end <= position:
            assert got is None
        else:
            assert got == _calls(position + 1, end)
            taken += got
            position = end
        sent_up_to = max(sent_up_to, end)
    assert taken == _calls(logged + 1, position) and intake.position("A") == position
    assert position == sent_up_to


@given(st.integers(0, 20), st.integers(2, 10), st.integers(1, 5))
def test_a_record_past_the_next_call_is_refused(taken: int, skip: int, calls: int) -> None:
    intake = LinkIntake(lambda _sender: taken)
    first = taken + skip
    with pytest.raises(UnexpectedMessageError):
        intake.take("A", first + calls - 1, calls, _calls(first, first + calls - 1))
    assert intake.position("A") == taken
