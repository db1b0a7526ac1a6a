"""A read's outputs routed as runs (``route_frames``) end where routing them one at a
time (``route_frame``) does: the same digest file, the same link queues and numbers
(calls a receiver already acknowledged dropped), the same self-calls and Impulses queued
for the log. Real coordinators on real files; their links are not started."""

from __future__ import annotations

from pathlib import Path

from ambrosia_ic import registry
from ambrosia_ic.coordinator import Coordinator, outputs
from ambrosia_ic.logstore.digest import DigestWriter, read_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ambrosia_py.wire import OutgoingRpc
from ambrosia_py.wire.outgoing import OutgoingFrame

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

outputs_of_a_read = st.lists(st.tuples(
    st.sampled_from(["", "me", "peer", "peer", "peer", "other"]),  # "me": a named self-call
    st.sampled_from([1, 1, 1, 2]),  # mostly forks, now and then an Impulse
    st.binary(max_size=20)), max_size=30)


def coordinator(home: Path, logs: Path, digest: Path, acked: int, skip: int) -> Coordinator:
    c = Coordinator(registry.load("me", home), home)
    c.links_active = False  # queues only: nothing here dials the peers
    c.digest = DigestWriter(digest)
    c.digest_skip = skip
    c.last_delivered = 41
    outputs.link_to(c, "peer").trim(acked)
    return c


def state(c: Coordinator) -> tuple[object, ...]:
    assert c.digest is not None
    c.digest.flush()
    return (read_digest(c.digest.path), c.digest_skip, c.self_calls.next,
            list(c.self_calls.unacked),
            list(c.pending),
            {d: (link.next_seq, list(link.unacked), list(link.box.impulses))
             for d, link in c.links.items()})


@SETTINGS
@given(st.lists(outputs_of_a_read, max_size=3), st.sampled_from([0, 0, 3]),
       st.sampled_from([0, 0, 2]))
def test_runs_of_outputs_are_routed_as_one_at_a_time(tmp_path: Path, reads, acked, skip
                                                     ) -> None:
    home = tmp_path / "home"
    if not home.exists():
        registry.register(instance_name="me", receive_port=42101, send_port=42102,
                          ic_port=42103, log_dir=tmp_path / "logs", home=home)
    n = len(list(tmp_path.glob("digest-*")))
    one = coordinator(home, tmp_path / "logs", tmp_path / f"digest-{n}-one", acked, skip)
    runs = coordinator(home, tmp_path / "logs", tmp_path / f"digest-{n}-runs", acked, skip)
    for i, read in enumerate(reads):
        frames = [OutgoingFrame(dest, rpc.incoming().encode(), rpc.encode(), kind == 2)
                  for dest, kind, args in read
                  for rpc in [OutgoingRpc(dest, 7, kind, args)]]
        for f in frames:
            outputs.route_frame(one, *f)
        outputs.route_frames(runs, frames)
        one.last_delivered = runs.last_delivered = 42 + i
    assert state(runs) == state(one)
