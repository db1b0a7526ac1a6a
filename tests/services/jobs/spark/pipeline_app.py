"""A ``SparkCoordinator`` for the tests: at its first job tick it submits a long job and
a job that fails every attempt, and cancels the long one once it has run for a while
(logged time). What its hooks saw is state, shown by the status. And the pipeline's
version after the sample's next one, for a second live upgrade."""

from __future__ import annotations

from typing import Any

from ambrosia_services.pipeline import SparkCoordinator

from samples.pipeline.next_version import WordCountPipelineV1

CANCEL_AFTER_NS = 4_000_000_000


class JobsApp(SparkCoordinator):
    def __init__(self) -> None:
        super().__init__()
        self.submitted_at = 0
        self.keys: list[str] = []
        self.heard: list[list[Any]] = []  # [hook, key, detail] in call order

    def wants_job_tick(self, now_ns: int) -> bool:
        return not self.keys or (self.keys[0] in self.jobs.jobs
                                 and now_ns - self.submitted_at >= CANCEL_AFTER_NS)

    def on_job_tick(self) -> None:
        now = self._now_ns()
        if not self.keys and self.jobs.runners:
            self.submitted_at = now
            self.keys = [self.submit_job("sleepy", {"rows": 40, "sleep_ms": 2000}),
                         self.submit_job("wordcount", {"input": "/nonexistent/words.txt"})]
        elif self.keys and now - self.submitted_at >= CANCEL_AFTER_NS:
            self.cancel_job(self.keys[0], "taking too long")

    def on_job_result(self, key: str, rows: list[Any]) -> None:
        self.heard.append(["result", key, len(rows)])

    def on_job_failed(self, key: str, reason: str) -> None:
        self.heard.append(["failed", key, reason[:60]])

    def state_status(self) -> dict[str, Any]:
        status = super().state_status()
        status["app"] = {"keys": self.keys, "heard": self.heard}
        return status

    def checkpoint_state(self) -> Any:
        state = super().checkpoint_state()
        state["app"] = [self.submitted_at, self.keys, self.heard]
        return state

    def load_state(self, state: Any) -> None:
        super().load_state(state)
        self.submitted_at, keys, heard = state["app"]
        self.keys, self.heard = list(keys), [list(h) for h in heard]


class WordCountPipelineV2(WordCountPipelineV1):
    """Version 2: version 1 again, under the next number."""

    version = 2
