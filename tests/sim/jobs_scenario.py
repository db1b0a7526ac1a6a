"""One run of ``jobs_world`` drawn from a seed (``JobsScenario``), its replay, and
``explain``: a failing seed's failure and a shortest run that still fails."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from .jobs_world import JobsWorld
from .world import Seeded, Step, explain_seed

__all__ = ["JobsScenario", "explain"]

_DISK_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
_WORDS = ("to", "be", "or", "not", "that", "is", "the", "question")


@attrs.frozen
class JobsScenario(Seeded):
    """One run's parameters, drawn from its seed."""

    seed: int
    batches: int
    runners: int
    fault_steps: int
    fault_rate: float

    @classmethod
    def of(cls, seed: int) -> JobsScenario:
        rng = random.Random(seed ^ 0x10B5)
        return cls(seed, batches=rng.randrange(1, 5), runners=rng.choice([1, 2, 3]),
                   fault_steps=rng.randrange(20, 90), fault_rate=rng.choice([0.05, 0.15, 0.3]))

    def inputs(self) -> list[list[str]]:
        rng = random.Random(self.seed)
        return [[" ".join(rng.choice(_WORDS) for _ in range(rng.randrange(1, 6)))
                 for _ in range(rng.randrange(1, 5))] for _ in range(self.batches)]

    def _world(self, go: Any) -> JobsWorld:
        directory = Path(tempfile.mkdtemp(prefix="jobsim.", dir=_DISK_ROOT))
        world = JobsWorld(self.inputs(), self.runners, directory)
        try:
            go(world, random.Random(self.seed))
            return world
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def run(self) -> JobsWorld:
        """The run the seed draws (raises ``SimFailure``)."""
        return self._world(lambda w, rng: w.run(rng, self.fault_steps, self.fault_rate))

    def replay(self, trace: list[Step]) -> JobsWorld:
        return self._world(lambda w, rng: w.replay(trace, rng))


def explain(seed: int) -> str:
    """What a failing seed did: its failure and a shortest run that still fails."""
    return explain_seed(seed, JobsScenario.of)
