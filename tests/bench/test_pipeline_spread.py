"""The pipeline bench's spread over runs: each run's ratios (lines/s, commit p99) against
Structured Streaming, and their median and range per corpus size."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_pipeline import BatchTimes, Comparison, Measured, ratios, spread, spread_lines


def _measured(system: str, seconds: float, commit_after: float) -> Measured:
    """1,000 lines in two batches, the last committed ``seconds`` after the start, each
    ``commit_after`` seconds after its lines were available."""
    batches = [BatchTimes(500, seconds / 2, available=seconds / 2 - commit_after),
               BatchTimes(500, seconds, available=seconds - commit_after)]
    return Measured(system, 1000, 0.0, batches, "ok", True)


def test_the_median_and_range_of_each_ratio_per_size() -> None:
    assert spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert spread([4.0, 1.0, 2.0, 3.0]) == (2.5, 1.0, 4.0)
    runs = [Comparison(1000, 500, _measured("pipeline", p, 1.0), _measured("ss", 10.0, 2.0))
            for p in (5.0, 10.0, 8.0)]  # 2x, 1x and 1.25x the lines/s; p99 half of SS's
    got = ratios(runs)
    assert got[1000]["lines/s"] == [2.0, 1.0, 1.25]
    assert got[1000]["commit p99"] == [0.5, 0.5, 0.5]
    assert spread_lines(runs) == [
        "1,000 lines, 3 runs (pipeline, SS, pipeline, SS, ...): lines/s ratio 1.25 "
        "(1.00-2.00); commit p99 ratio 0.50 (0.50-0.50)"]
    assert spread_lines(runs[:1]) == []  # one run: no spread to speak of
