"""An instance's calls to itself without I/O: through recoveries from any checkpoint,
with any prefix of them logged, each call is logged exactly once and in order."""

from __future__ import annotations

from ambrosia_ic.coordinator.self_calls import SelfCalls
from hypothesis import given, settings
from hypothesis import strategies as st


def test_a_regenerated_call_is_dropped_and_an_unlogged_one_comes_back() -> None:
    s = SelfCalls()
    assert [s.number(b"a", 0), s.number(b"b", 0), s.number(b"c", 0)] == [1, 2, 3]
    s.trim(1)
    saved = s.snapshot()
    assert saved == {"next": 4, "unacked": [[2, b"b"], [3, b"c"]]}
    again = SelfCalls()  # a recovery from that checkpoint, the log holding call 2
    assert again.restore(saved, logged=2) == [(3, b"c")]  # 3 was never logged
    assert again.number(b"d", 3) == 4 and list(again.unacked) == [(3, b"c"), (4, b"d")]
    replay = SelfCalls()  # a replay from the start regenerates 1..3: all logged
    assert [replay.number(x, 3) for x in (b"a", b"b", b"c")] == [None] * 3
    assert replay.number(b"d", 3) == 4


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.just("call"), st.just("commit"), st.just("checkpoint"),
                          st.just("crash")), max_size=80))
def test_each_self_call_is_logged_once_in_order_through_crashes(steps: list[str]) -> None:
    """A binding makes calls 1, 2, ... (its state counts them); commits log what is
    queued; checkpoints save the binding's count and the calls' snapshot; a crash loses
    the queue and the unlogged state and recovers from the last checkpoint, the binding
    replaying the log's calls after it (regenerating the calls it made meanwhile)."""
    log: list[int] = []  # the self-call numbers the log holds, in order
    made = 0  # calls the binding has made (its state)
    calls = SelfCalls()
    queue: list[int] = []  # queued for the next record
    checkpoint: tuple[int, dict[str, object]] = (0, calls.snapshot())
    for step in steps:
        if step == "call":
            made += 1
            seq = calls.number(b"%d" % made, len(log))
            if seq is not None:
                queue.append(seq)
        elif step == "commit":
            log += queue
            queue = []
            calls.trim(len(log))
        elif step == "checkpoint":
            checkpoint = (made, calls.snapshot())
        else:  # crash: recover from the checkpoint, then the binding's replay
            calls = SelfCalls()
            made, saved = checkpoint
            queue = [seq for seq, _ in calls.restore(saved, len(log))]
            # Replaying the log's records after the checkpoint makes the binding repeat
            # the calls it made after it; the log holds the ones that were committed.
            while made < len(log):
                made += 1
                assert calls.number(b"%d" % made, len(log)) is None
        assert log == list(range(1, len(log) + 1))  # once each, in order
