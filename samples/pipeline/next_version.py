"""The pipeline's next version, for a live upgrade of a running pipeline (``make demo``
switches to it part-way).

It decides everything as version 0 does and keeps its state as version 0 does, so it needs
no ``upgrade_from``: the job table, the micro-batch being filled, the batches in flight and
the results waiting their turn all carry over as they are. Its status says which code
runs, so a watcher can tell that what came after the switch went through it.

Live: ``ambrosia run wordcount -i wordcount --config FILE
--upgrade-to samples.pipeline.next_version:WordCountPipelineV1``.
"""

from __future__ import annotations

from typing import Any

from ambrosia_services.pipeline import WordCountPipeline

__all__ = ["WordCountPipelineV1"]


class WordCountPipelineV1(WordCountPipeline):
    """Version 1: version 0's decisions and state; its status names the code version."""

    version = 1

    def on_upgrade(self, live: bool) -> None:
        b = self.state_status()["batches"]
        self.ctx.log.info("version %d took over: %d batches cut, %d emitted, %d lines in the "
                          "batch being filled, %d jobs in flight", type(self).version,
                          b["cut"], b["emitted"], b["pending_lines"], len(self.jobs.jobs))

    def state_status(self) -> dict[str, Any]:
        status = super().state_status()
        status["code_version"] = type(self).version
        return status
