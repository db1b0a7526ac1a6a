"""The commit clock: each transaction's latency runs from the logged emit time of its
oldest byte to its commit, through aborts, on the real core's records."""

from __future__ import annotations

from ambrosia_services.connectors.coordinator.commits import Commit, CommitClock
from ambrosia_services.connectors.coordinator.core import ConnectorCore

S = 1_000_000_000  # ns


def _core() -> ConnectorCore:
    core = ConnectorCore()
    core.configure({"sinks": ["a", "b"], "interval_bytes": 1 << 20, "interval_seconds": 5.0},
                   "me")
    return core


def test_latency_runs_from_the_oldest_emitted_byte_to_the_commit() -> None:
    core, clock = _core(), CommitClock()
    seen: list[Commit] = []
    clock.listeners.append(seen.append)
    core.emit("a", b"first", 100 * S)  # the logged emit time, not when it is looked at
    clock.observe("a", core.sinks["a"], 100.5)
    core.emit("a", b"later", 103 * S)
    clock.observe("a", core.sinks["a"], 103.1)
    core.tick(105 * S)  # old enough: cut
    rec = core.sinks["a"]
    assert rec.txn_id == "me-a-1"
    clock.observe("a", rec, 105.0)
    core.sink_voted("a", "me-a-1", True, 106 * S)
    done = clock.decided("a", "me-a-1", True, 106.25)
    assert done == Commit(106.25, "a", 6.25, 10)
    assert seen == [done] and clock.commits == 1
    assert clock.summary() == {"commits": 1, "last_ms": 6250.0, "p50_ms": 6250.0,
                               "max_ms": 6250.0}
    # A second Phase2 of the same transaction (a resend) is not counted again.
    assert clock.decided("a", "me-a-1", True, 107.0) is None
    assert clock.commits == 1


def test_an_abort_hands_its_start_to_the_transaction_that_carries_its_bytes() -> None:
    core, clock = _core(), CommitClock()
    core.emit("a", b"hello", 10 * S)
    clock.observe("a", core.sinks["a"], 10.0)
    core.flush(11 * S)
    clock.observe("a", core.sinks["a"], 11.0)
    # The sink votes no: the state aborts and cuts the same bytes again at once, before
    # the link has reported the abort's Phase2.
    core.sink_voted("a", "me-a-1", False, 12 * S)
    assert core.sinks["a"].txn_id == "me-a-2"
    clock.observe("a", core.sinks["a"], 12.0)
    assert clock.decided("a", "me-a-1", False, 12.1) is None
    core.sink_voted("a", "me-a-2", True, 13 * S)
    done = clock.decided("a", "me-a-2", True, 13.0)
    assert done is not None and done.latency == 3.0  # from 10 s, not from the re-cut


def test_an_abort_reported_before_the_re_cut_keeps_the_start_too() -> None:
    core, clock = _core(), CommitClock()
    core.emit("b", b"xy", 20 * S)
    clock.observe("b", core.sinks["b"], 20.0)
    core.flush(20 * S)
    clock.observe("b", core.sinks["b"], 20.0)
    assert clock.decided("b", "me-b-1", False, 21.0) is None
    core.emit("b", b"z", 22 * S)  # newer bytes do not make the old ones younger
    clock.observe("b", core.sinks["b"], 22.0)
    core.sink_voted("b", "me-b-1", False, 23 * S)
    clock.observe("b", core.sinks["b"], 23.0)
    done = clock.decided("b", "me-b-2", True, 24.0)
    assert done is not None and (done.latency, done.size) == (4.0, 3)


def test_bytes_emitted_and_cut_in_one_run_start_when_first_seen() -> None:
    core, clock = _core(), CommitClock()
    core.emit("a", b"batch", 50 * S)
    core.flush(50 * S)  # a pipeline's batch: emitted and flushed by one handler
    clock.observe("a", core.sinks["a"], 50.2)
    done = clock.decided("a", "me-a-1", True, 50.7)
    assert done is not None and round(done.latency, 6) == 0.5
    # Sinks are measured apart.
    assert clock.decided("b", "me-a-1", True, 51.0) is None
