"""The deterministic simulation of the whole pipeline (``pipejobs_world``): the real word
count immortal on the engine, its real job links (``JobsLive``, ``JobLinks``,
``InitiatorJobs``) and job table, simulated runners that crash and stream again, the
source's lines staged in real segments and collected, and the output committed through
real sink sessions to one or two real 2PC file sinks on a simulated disk; the
coordinator, runners and sinks crashed between any two steps of a batch's life. Each run
is checked for every batch committed to every sink exactly once and in batch order, equal
to a word count of the lines it covers, nothing left in doubt or held, every sink's
COMMIT and ABORT the coordinator's decision, and a replay of the log rebuilding the
state. Each mutation in ``pipejobs_mutants`` is found within ``MUTANT_SEEDS`` seeds, and
a failing seed reproduces exactly and shrinks to a short run. ``make chaos`` runs many
more seeds."""

from __future__ import annotations

import pytest

from tests.sim.pipejobs_mutants import PIPEJOBS_MUTANTS
from tests.sim.pipejobs_scenario import PipeJobsScenario, explain
from tests.sim.seeds import first_failing, sweep
from tests.sim.world import SimFailure

SEEDS = 200  # in CI, about 9 s of CPU (the whole file about 12 s)
CHAOS_CHUNKS = 10
CHAOS_PER_CHUNK = 1500
MUTANT_SEEDS = 500  # a mutant must be found within this many seeds


def test_every_batch_is_counted_and_committed_once_in_order_through_crashes() -> None:
    seen = sweep(PipeJobsScenario.of, 0, SEEDS)
    # The runs did what they are for: every fault and every way back, many times.
    for what in ("recovered", "checkpoint", "runner-crash", "runner-drop", "reconciled",
                 "a later batch's result waited", "re-sent and dropped",
                 "segments collected", "commits", "crash at a disk call",
                 "crash in a recovery", "attempts beyond the first", "refused"):
        assert seen[what] >= 10, (what, seen)
    assert seen["runner-again"] >= 5, seen
    assert seen["aborts"] >= 1, seen


@pytest.mark.chaos
@pytest.mark.timeout(1200)  # CPU-bound: on a busy machine a chunk took over 300 s
@pytest.mark.parametrize("chunk", range(CHAOS_CHUNKS))
def test_many_more_seeds(chunk: int) -> None:
    sweep(PipeJobsScenario.of, 10_000 + chunk * CHAOS_PER_CHUNK, CHAOS_PER_CHUNK)


@pytest.mark.parametrize("mutant", sorted(PIPEJOBS_MUTANTS))
def test_each_mutant_of_the_pipeline_is_found(mutant: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    where, name, wrong = PIPEJOBS_MUTANTS[mutant]
    monkeypatch.setattr(where, name, wrong)
    assert first_failing(PipeJobsScenario.of, MUTANT_SEEDS) is not None, f"not found: {mutant}"


def test_a_failing_seed_reproduces_exactly_and_shrinks(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    where, name, wrong = PIPEJOBS_MUTANTS[
        "a batch's output goes out as its job finishes, out of batch order"]
    monkeypatch.setattr(where, name, wrong)
    seed = first_failing(PipeJobsScenario.of, MUTANT_SEEDS)
    assert seed is not None
    scenario = PipeJobsScenario.of(seed)
    runs = []
    for _ in range(2):
        with pytest.raises(SimFailure) as failed:
            scenario.run()
        runs.append((str(failed.value), failed.value.trace))
    assert runs[0] == runs[1]  # the same steps, the same failure
    text = explain(seed)
    assert f"seed {seed}" in text and "a shortest run found" in text
    shown = int(text.split("a shortest run found (")[1].split(" of ")[0])
    assert shown < len(runs[0][1])
    monkeypatch.undo()
    assert explain(seed) == f"seed {seed} passes"
