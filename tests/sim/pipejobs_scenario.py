"""One run of ``pipejobs_world`` drawn from a seed (``PipeJobsScenario``), its replay, and
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
from ambrosia_services.pipeline import coordinator as coordinator_module

from .pipe_disk import sink_disk
from .pipejobs_world import PipeJobsWorld
from .world import Seeded, Step, explain_seed

__all__ = ["PipeJobsScenario", "explain"]

_DISK_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
_WORDS = ("To", "be", "or", "not", "to", "BE", "that", "is", "the", "question's")


@attrs.frozen
class PipeJobsScenario(Seeded):
    """One run's parameters, drawn from its seed."""

    seed: int
    messages: int
    sinks: int
    runners: int
    jobs_in_flight: int
    max_batch_lines: int
    segment_bytes: int
    fault_steps: int
    fault_rate: float

    @classmethod
    def of(cls, seed: int) -> PipeJobsScenario:
        rng = random.Random(seed ^ 0x9195)
        return cls(seed, messages=rng.randrange(2, 7), sinks=rng.choice([1, 2]),
                   runners=rng.choice([1, 2, 3]), jobs_in_flight=rng.choice([1, 2, 3]),
                   max_batch_lines=rng.choice([1, 2, 3, 1000]),
                   segment_bytes=rng.choice([150, 400, 1 << 20]),
                   fault_steps=rng.randrange(40, 160), fault_rate=rng.choice([0.05, 0.15, 0.3]))

    def inputs(self) -> list[bytes]:
        """The source's messages: each one to three lines of words."""
        rng = random.Random(self.seed)
        return ["".join(" ".join(rng.choice(_WORDS) for _ in range(rng.randrange(1, 5))) + "\n"
                        for _ in range(rng.randrange(1, 4))).encode()
                for _ in range(self.messages)]

    def settings(self) -> dict[str, Any]:
        return {"max_attempts": 3, "batch_lines": 1, "batch_seconds": 3600,
                "job_timeout_seconds": 0, "jobs_in_flight": self.jobs_in_flight,
                "max_batch_lines": self.max_batch_lines}

    def _world(self, go: Any) -> PipeJobsWorld:
        directory = Path(tempfile.mkdtemp(prefix="pipejobsim.", dir=_DISK_ROOT))
        world = PipeJobsWorld(self.inputs(), self.sinks, self.runners, self.settings(),
                              self.segment_bytes, directory)
        saved = immortal_module.Live, coordinator_module.JobsLive
        quiet = logging.root.manager.disable
        immortal_module.Live = world.make_live  # type: ignore[assignment,misc]
        coordinator_module.JobsLive = world.make_jobs  # type: ignore[assignment,misc]
        logging.disable(logging.CRITICAL)  # the sink's and coordinator's lines: expected
        try:
            with sink_disk(world.disk):
                go(world, random.Random(self.seed))
            return world
        finally:
            world.disk.close_all()
            world.close()
            immortal_module.Live, coordinator_module.JobsLive = saved  # type: ignore[misc]
            logging.disable(quiet)
            shutil.rmtree(directory, ignore_errors=True)

    def run(self) -> PipeJobsWorld:
        """The run the seed draws (raises ``SimFailure``)."""
        return self._world(lambda w, rng: w.run(rng, self.fault_steps, self.fault_rate))

    def replay(self, trace: list[Step]) -> PipeJobsWorld:
        return self._world(lambda w, rng: w.replay(trace, rng))


def explain(seed: int) -> str:
    """What a failing seed did: its failure and a shortest run that still fails."""
    return explain_seed(seed, PipeJobsScenario.of)
