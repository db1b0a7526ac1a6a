"""Crash injection inside the suite: a small ``bench/chaos.py`` run with a random seed.

A client immortal sends numbered requests to a server immortal while the binding or the
coordinator of either side is killed with ``kill -9`` at random points; afterwards each
instance's kept checkpoint and log are replayed and the server must hold every request
exactly once and in order, the client every reply.
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chaos() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("chaos")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.slow
# `make chaos` (and its bench/chaos.py runs at scale): random kill -9s of both instances stay
# in make test in tests/runtime/test_e2e.py, of a binding or its coordinator alone in
# tests/services/jobs/spark/test_pipeline.py and tests/services/connectors/test_crashes.py.
@pytest.mark.chaos
def test_every_request_applied_once_in_order_across_random_kills(
        chaos: ModuleType, tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(1 << 32)
    lines: list[str] = []
    run = chaos.ChaosRun(150, 6, seed, tmp_path, checkpoint_every=15, stall=60.0,
                         say=lines.append)
    try:
        summary = run.execute()
    except chaos.ChaosError as e:
        pytest.fail(f"seed {seed}: {e}\nreproduce with: {run.reproduce()}")
    assert sum(summary["killed"].values()) == 6, (seed, lines)
    kills_server = summary["killed"]["server binding"] + summary["killed"]["server coordinator"]
    assert summary["server_lives"] == 1 + kills_server
    assert summary["client_lives"] == 1 + 6 - kills_server
    assert sum(ln.startswith("kill ") for ln in lines) == 6, lines


@pytest.mark.slow
@pytest.mark.chaos  # `make chaos`: kill -9 into the zeros stays in tests/ic/test_prealloc
def test_coordinator_kills_while_records_go_into_zeros_written_ahead(
        chaos: ModuleType, tmp_path: Path) -> None:
    """Only coordinators are killed, writing 4 KiB ahead (an extension every few dozen
    records, a log switch at every checkpoint): each kill leaves a log ending in zeros,
    perhaps a record cut short over them or a switch half done."""
    seed = random.SystemRandom().randrange(1 << 32)
    lines: list[str] = []
    run = chaos.ChaosRun(100, 5, seed, tmp_path, checkpoint_every=10, stall=60.0,
                         victims=("server coordinator", "client coordinator"),
                         say=lines.append)
    run.env["AMBROSIA_IC_PREALLOC"] = "4"
    try:
        run.execute()
    except chaos.ChaosError as e:
        pytest.fail(f"seed {seed} (AMBROSIA_IC_PREALLOC=4): {e}\n"
                    f"reproduce with: AMBROSIA_IC_PREALLOC=4 {run.reproduce()}")
    assert sum(ln.startswith("kill ") for ln in lines) == 5, lines


def test_a_kill_schedule_depends_only_on_the_seed(chaos: ModuleType, tmp_path: Path) -> None:
    a = chaos.ChaosRun(500, 8, 7, tmp_path / "a").schedule()
    b = chaos.ChaosRun(500, 8, 7, tmp_path / "b").schedule()
    c = chaos.ChaosRun(500, 8, 8, tmp_path / "c").schedule()
    assert a == b
    assert a != c
    assert [p for p, _, _ in a] == sorted(p for p, _, _ in a)
    assert all(1 <= p < 500 and v in chaos.VICTIMS for p, v, _ in a)


@pytest.mark.parametrize(("applied", "replies", "done", "complaint"), [
    ([1, 2, 2, 3], [[1, 1], [2, 2], [3, 3]], True, "1 duplicates"),
    ([1, 3], [[1, 1], [2, 2], [3, 3]], True, "first wrong at index 1"),
    ([2, 1, 3], [[1, 1], [2, 2], [3, 3]], True, "first wrong at index 0"),
    ([1, 2, 3], [[1, 1], [2, 2]], True, "holds 2 replies"),
    ([1, 2, 3], [[1, 1], [2, 2], [3, 4]], True, "first wrong at index 2"),
    ([1, 2, 3], [[1, 1], [2, 2], [3, 3]], False, "not finished"),
])
def test_the_checker_names_what_is_wrong(chaos: ModuleType, applied: list[int],
                                         replies: list[list[int]], done: bool,
                                         complaint: str) -> None:
    assert chaos.check_states(3, [1, 2, 3], [[1, 1], [2, 2], [3, 3]], True) == []
    problems = chaos.check_states(3, applied, replies, done)
    assert len(problems) == 1 and complaint in problems[0], problems


def test_the_checker_names_a_tally_broken_by_a_replay(chaos: ModuleType) -> None:
    replies = [[1, 1], [2, 2], [3, 3]]
    assert chaos.check_states(3, [1, 2, 3], replies, True, [1, 2, 3]) == []
    problems = chaos.check_states(3, [1, 2, 3], replies, True, [1, 2, 2, 3])
    assert len(problems) == 1 and "tallied 4 requests (1 duplicates)" in problems[0], problems
    assert "tallied 2" in chaos.check_states(3, [1, 2, 3], replies, True, [1, 3])[0]


def test_victims_can_be_chosen(chaos: ModuleType, tmp_path: Path) -> None:
    only = ("server binding", "client binding")
    plan = chaos.ChaosRun(500, 40, 7, tmp_path / "a", victims=only).schedule()
    assert {v for _, v, _ in plan} == set(only)
    with pytest.raises(ValueError, match="victims must be some of"):
        chaos.ChaosRun(500, 4, 7, tmp_path / "b", victims=("server disk",))
