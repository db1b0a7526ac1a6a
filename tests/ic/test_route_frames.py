"""A read's outputs routed as runs (``route_frames``) end where routing them one at a
time (``route_frame``) does: the same digest file, the same link queues and numbers
(calls a receiver already acknowledged dropped), the same self-calls and Impulses queued
for the log, the same links asked for. Coordinator cores, with the digest on real files."""

from __future__ import annotations

from pathlib import Path

from ambrosia_ic.coordinator.core import CoordinatorCore
from ambrosia_ic.logstore.digest import DigestWriter, read_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ambrosia_core.wire import OutgoingRpc
from ambrosia_core.wire.outgoing import OutgoingFrame

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

outputs_of_a_read = st.lists(st.tuples(
    st.sampled_from(["", "me", "peer", "peer", "peer", "other"]),  # "me": a named self-call
    st.sampled_from([1, 1, 1, 2]),  # mostly forks, now and then an Impulse
    st.binary(max_size=20)), max_size=30)


def coordinator(digest: Path, acked: int, skip: int) -> CoordinatorCore:
    c = CoordinatorCore("me", 1)
    c.use_digest(DigestWriter(digest), skip)
    c.replayed(41)
    c.outbox("peer").trim(acked)
    return c


def state(c: CoordinatorCore) -> tuple[object, ...]:
    digest = c.digest
    assert isinstance(digest, DigestWriter)
    digest.flush()
    return (read_digest(digest.path), c.digest_skip, c.self_calls.next,
            list(c.self_calls.unacked),
            list(c.group.pending),
            {d: (box.next_seq, list(box.unacked), list(box.impulses))
             for d, box in c.outboxes.items()},
            c.actions)


@SETTINGS
@given(st.lists(outputs_of_a_read, max_size=3), st.sampled_from([0, 0, 3]),
       st.sampled_from([0, 0, 2]))
def test_runs_of_outputs_are_routed_as_one_at_a_time(tmp_path: Path, reads, acked, skip
                                                     ) -> None:
    n = len(list(tmp_path.glob("digest-*")))
    one = coordinator(tmp_path / f"digest-{n}-one", acked, skip)
    runs = coordinator(tmp_path / f"digest-{n}-runs", acked, skip)
    for i, read in enumerate(reads):
        frames = [OutgoingFrame(dest, rpc.incoming().encode(), rpc.encode(), kind == 2)
                  for dest, kind, args in read
                  for rpc in [OutgoingRpc(dest, 7, kind, args)]]
        for f in frames:
            one.route_frame(*f)
        runs.route_frames(frames)
        one.replayed(42 + i)
        runs.replayed(42 + i)
    assert state(runs) == state(one)
