"""The deterministic simulation of the pipeline's commit path (``pipe_world``): a source,
the real connector coordinator on the engine, its real sink sessions and one or two real
2PC file sinks on a simulated disk, with the coordinator crashed and recovered from its
log, the sinks crashed between any two of their durable steps or disk calls (unsynced
writes lost, kept or cut short), connections dropped and their last bytes arriving late,
a link's report delivered twice, and ACKs lost; each run checked for every batch committed
exactly once and in order, nothing left in doubt, every sink transaction settled by the
coordinator's decision, a decision never changed, totals equal to the input, and a
replay of the log rebuilding the state. Each mutation in ``pipe_mutants`` is found within
``MUTANT_SEEDS`` seeds, and a failing seed reproduces exactly and shrinks to a short run.
``make chaos`` runs many more seeds."""

from __future__ import annotations

import pytest

from tests.sim.pipe_mutants import PIPE_MUTANTS
from tests.sim.pipe_scenario import PipeScenario, explain
from tests.sim.seeds import first_failing, sweep
from tests.sim.world import SimFailure

CHUNKS = 2
PER_CHUNK = 600  # CHUNKS * PER_CHUNK seeds in CI
CHAOS_CHUNKS = 10
CHAOS_PER_CHUNK = 2500
MUTANT_SEEDS = 2000  # a mutant must be found within this many seeds


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_batch_is_committed_once_in_order_through_crashes(chunk: int) -> None:
    seen = sweep(PipeScenario.of, chunk * PER_CHUNK, PER_CHUNK)
    # The runs did what they are for: every fault and every way back, many times.
    for what in ("recovered", "checkpoint", "drop", "ack", "again", "commits", "aborts",
                 "crash at a disk call", "crash in a recovery"):
        assert seen[what] >= 40, (what, seen)
    for step in ("pending-synced", "prepare-logged", "commit-logged", "commit-applied"):
        assert seen[f"crash at {step}"] >= 5, (step, seen)
    assert seen["crash at abort-logged"] >= 1, seen
    # What a crash did to unsynced writes: files lost with their directory entry, files
    # back to their last sync, cut inside what was appended, or kept whole.
    assert seen["lost"] >= 20, seen
    assert seen["reverted"] + seen["torn"] + seen["kept"] >= 10, seen


@pytest.mark.chaos
@pytest.mark.timeout(1200)  # CPU-bound: on a busy machine a chunk took over 300 s
@pytest.mark.parametrize("chunk", range(CHAOS_CHUNKS))
def test_many_more_seeds(chunk: int) -> None:
    sweep(PipeScenario.of, 10_000 + chunk * CHAOS_PER_CHUNK, CHAOS_PER_CHUNK)


@pytest.mark.parametrize("mutant", sorted(PIPE_MUTANTS))
def test_each_mutant_of_the_commit_path_is_found(mutant: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cls, name, wrong = PIPE_MUTANTS[mutant]
    monkeypatch.setattr(cls, name, wrong)
    assert first_failing(PipeScenario.of, MUTANT_SEEDS) is not None, f"not found: {mutant}"


def test_a_failing_seed_reproduces_exactly_and_shrinks(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    cls, name, wrong = PIPE_MUTANTS["a batch sent again is applied again"]
    monkeypatch.setattr(cls, name, wrong)
    seed = first_failing(PipeScenario.of, MUTANT_SEEDS)
    assert seed is not None
    scenario = PipeScenario.of(seed)
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
