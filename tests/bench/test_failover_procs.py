"""The failover-through-coordinators benchmark's machinery: a real three-replica set
with local files survives a kill -9 of its primary's coordinator with every request
applied once, and its checker refuses replies that say otherwise. No timing asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import failover_procs  # noqa: E402

sys.path.remove(str(BENCH))


@pytest.mark.integration
@pytest.mark.slow
def test_a_kill_with_local_files(tmp_path: Path) -> None:
    out = failover_procs.measure(tmp_path, "", ["coordinator"])
    (sample,) = out["coordinator"]
    assert sample["from"] != sample["to"] and sample["seconds"] >= sample["became"] > 0
    assert out["requests"] > 40


def test_the_checker() -> None:
    good = "1 10.0\n2 10.1\n3 10.2\ndone 3\n"
    assert failover_procs.check_replies(good) == 3
    for bad in ("1 10.0\n3 10.2\ndone 3\n",  # a reply missing
                "1 10.0\n2 10.1\n2 10.1\n3 10.2\ndone 3\n",  # a reply twice
                "1 10.0\nerror request 2 replied [3, 4]\n2 10.1\ndone 2\n",
                "1 10.0\n2 10.1\n"):  # never finished
        with pytest.raises(RuntimeError, match="replies are wrong"):
            failover_procs.check_replies(bad)
