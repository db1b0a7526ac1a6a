"""The alternatives benchmark's workloads are correct: exactly once, retries not re-applied.

These run the real contenders with a tiny request count; no timing is asserted.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def alt():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("bench_alternatives")
    finally:
        sys.path.remove(str(BENCH))


def _check(result, requests: int, warmup: int, wl) -> None:
    assert result.requests == requests
    assert len(result.latencies_ns) == requests
    assert result.final_state == wl.expected_state(warmup + requests)
    assert result.retries_checked >= 3


def test_grpc_counter_applies_each_request_once(alt) -> None:
    _check(alt.run_grpc(20, 3), 20, 3, alt.wl)


def test_tcp_counter_applies_each_request_once(alt) -> None:
    _check(alt.run_tcp(20, 3), 20, 3, alt.wl)


def test_dbos_counter_applies_each_request_once(alt) -> None:
    _check(alt.run_dbos(8, 2), 8, 2, alt.wl)


def test_dedup_counter_answers_a_retry_with_the_first_reply(alt) -> None:
    wl = alt.wl
    counter = wl.DedupCounter()
    first = counter.handle(wl.encode(7, 7))
    assert wl.decode(first) == (1, 7)
    assert counter.handle(wl.encode(7, 7)) == first
    assert wl.decode(counter.handle(wl.encode(wl.STATE_QUERY_ID, 0))) == (1, 7)


def test_workload_rejects_a_server_that_applies_retries_twice(alt) -> None:
    """The checker itself: a counter without de-duplication must fail the run."""
    wl = alt.wl
    state = [0, 0]

    def no_dedup(request_id: int, amount: int) -> tuple[int, int]:
        state[0] += 1
        state[1] += amount
        return state[0], state[1]

    with pytest.raises(wl.WorkloadError, match="retried request"):
        wl.run_workload("broken", no_dedup, lambda: (state[0], state[1]), 5)


def test_workload_rejects_a_lost_request(alt) -> None:
    wl = alt.wl
    counter = wl.DedupCounter()

    def lossy(request_id: int, amount: int) -> tuple[int, int]:
        if request_id == 3:  # acknowledged but never applied
            return wl.expected_state(3)
        return wl.decode(counter.handle(wl.encode(request_id, amount)))

    with pytest.raises(wl.WorkloadError):
        wl.run_workload("lossy", lossy, lambda: (counter.count, counter.total), 5)


def test_figures_carry_same_run_ratios(alt) -> None:
    wl = alt.wl

    def fake(name: str, per_request_ns: int) -> wl.RunResult:
        return wl.RunResult(name, 10, per_request_ns * 10 / 1e9, [per_request_ns] * 10,
                            wl.expected_state(10), 3)

    rows = alt.figures({"tcp": [fake("tcp", 1000)], "grpc": [fake("grpc", 4000)],
                        "dbos": [fake("dbos", 40000)]})
    by_name = {r["name"]: r for r in rows}
    grpc_rps = by_name["alternatives.grpc.requests_per_s"]
    assert grpc_rps["extra"]["baseline_name"] == "alternatives.tcp.requests_per_s"
    assert grpc_rps["baseline"] == pytest.approx(1e6)
    assert grpc_rps["ratio"] == pytest.approx(0.25)
    dbos_p50 = by_name["alternatives.dbos.p50_latency_us"]
    assert dbos_p50["extra"]["baseline_name"] == "alternatives.grpc.p50_latency_us"
    assert dbos_p50["baseline"] == pytest.approx(4.0)
    assert dbos_p50["ratio"] == pytest.approx(10.0)
    assert dbos_p50["extra"]["ratio_vs_tcp"] == pytest.approx(40.0)
    assert dbos_p50["extra"]["paired_ratio_median"] == pytest.approx(10.0)
    assert by_name["alternatives.tcp.requests_per_s"]["ratio"] == 1.0


def test_ambrosia_counter_applies_each_request_once(alt) -> None:
    _check(alt.run_ambrosia(8, 2), 8, 2, alt.wl)
