"""The deterministic simulation of the job table and its runners (``jobs_world``): the
pipeline's batches as jobs decided by the real ``JobTable``, launched, cancelled and
reconciled by the real ``LinkPlan`` that the primary's links ask, committed on the runners
by the real staging rename, with the coordinator crashed (its table kept by the log),
runners crashed between any two steps of a job's life, connections dropped and result
streams sent again; each run checked for every batch's result taken once in order, the
totals equal to a word count of the input, no loss counted as a failed attempt, and no job
started again after its commit.
Each mutation in ``jobs_mutants`` is found within ``MUTANT_SEEDS`` seeds. ``make chaos``
runs many more seeds."""

from __future__ import annotations

import pytest

from tests.sim.jobs_mutants import JOBS_MUTANTS
from tests.sim.jobs_scenario import JobsScenario, explain
from tests.sim.seeds import first_failing, sweep
from tests.sim.world import SimFailure

SEEDS = 800  # in CI, about 4 s
CHAOS_CHUNKS = 10
CHAOS_PER_CHUNK = 2500
MUTANT_SEEDS = 2000  # a mutant must be found within this many seeds


def test_every_batchs_job_result_is_taken_once_in_order_through_crashes() -> None:
    seen = sweep(JobsScenario.of, 0, SEEDS)
    # The runs did what they are for: every fault and every way back, many times.
    for what in ("coordinator crashed", "crash", "drop", "again", "lost", "refused",
                 "reconciled UNKNOWN", "reconciled COMMITTED", "reconciled FINISHED_STAGING"):
        assert seen[what] >= 40, (what, seen)


@pytest.mark.chaos
@pytest.mark.timeout(1200)  # CPU-bound: on a busy machine a chunk took over 300 s
@pytest.mark.parametrize("chunk", range(CHAOS_CHUNKS))
def test_many_more_seeds(chunk: int) -> None:
    sweep(JobsScenario.of, 10_000 + chunk * CHAOS_PER_CHUNK, CHAOS_PER_CHUNK)


@pytest.mark.parametrize("mutant", sorted(JOBS_MUTANTS))
def test_each_mutant_of_the_job_table_and_its_links_is_found(
        mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    where, name, wrong = JOBS_MUTANTS[mutant]
    monkeypatch.setattr(where, name, wrong)
    assert first_failing(JobsScenario.of, MUTANT_SEEDS) is not None, f"not found: {mutant}"


def test_a_failing_seed_reproduces_exactly_and_shrinks(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    where, name, wrong = JOBS_MUTANTS["a result batch delivered again is taken again"]
    monkeypatch.setattr(where, name, wrong)
    seed = first_failing(JobsScenario.of, MUTANT_SEEDS)
    assert seed is not None
    scenario = JobsScenario.of(seed)
    runs = []
    for _ in range(2):
        with pytest.raises(SimFailure) as failed:
            scenario.run()
        runs.append((str(failed.value), failed.value.trace))
    assert runs[0] == runs[1]  # the same steps, the same failure
    text = explain(seed)
    assert f"seed {seed}" in text and "a shortest run found" in text
    monkeypatch.undo()
    assert explain(seed) == f"seed {seed} passes"
