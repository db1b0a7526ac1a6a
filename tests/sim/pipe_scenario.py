"""One run of ``pipe_world`` drawn from a seed (``PipeScenario``), its replay, and
``explain``: a failing seed's failure and a shortest run that still fails."""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
from ambrosia_services.connectors.coordinator import immortal as immortal_module

from .pipe_disk import sink_disk
from .pipe_world import PipeWorld
from .world import Seeded, Step, explain_seed

__all__ = ["PipeScenario", "explain"]

_DISK_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None


@attrs.frozen
class PipeScenario(Seeded):
    """One run's parameters, drawn from its seed."""

    seed: int
    batches: int
    lines: int
    sinks: int
    fault_steps: int
    fault_rate: float

    @classmethod
    def of(cls, seed: int) -> PipeScenario:
        rng = random.Random(seed ^ 0x5EED)
        return cls(seed, batches=rng.randrange(2, 7), lines=rng.randrange(1, 4),
                   sinks=rng.choice([1, 2]), fault_steps=rng.randrange(20, 100),
                   fault_rate=rng.choice([0.05, 0.15, 0.3]))

    def _world(self, go: Any) -> PipeWorld:
        directory = Path(tempfile.mkdtemp(prefix="pipesim.", dir=_DISK_ROOT))
        world = PipeWorld(self.batches, self.lines, self.sinks, directory)
        saved, quiet = immortal_module.Live, logging.root.manager.disable
        immortal_module.Live = world.make_live  # type: ignore[assignment,misc]
        logging.disable(logging.CRITICAL)  # the sink's and coordinator's lines: expected
        try:
            with sink_disk(world.disk):
                go(world, random.Random(self.seed))
            return world
        finally:
            world.disk.close_all()
            immortal_module.Live = saved  # type: ignore[misc]
            logging.disable(quiet)
            shutil.rmtree(directory, ignore_errors=True)

    def run(self) -> PipeWorld:
        """The run the seed draws (raises ``SimFailure``)."""
        return self._world(lambda w, rng: w.run(rng, self.fault_steps, self.fault_rate))

    def replay(self, trace: list[Step]) -> PipeWorld:
        return self._world(lambda w, rng: w.replay(trace, rng))


def explain(seed: int) -> str:
    """What a failing seed did: its failure and a shortest run that still fails."""
    return explain_seed(seed, PipeScenario.of)
