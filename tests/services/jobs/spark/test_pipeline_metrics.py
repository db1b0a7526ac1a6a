"""The pipeline's job metrics from a real ``ambrosia run`` with a real runner: jobs by
state from the job table, attempts, and the duration of the job that ended (failed)
while the process was primary; a cancelled job has no duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from ambrosia_core.ports import free_ports
from tests.core.scraping import scrape, value
from tests.launcher import Launcher, launcher, wait_until  # noqa: F401 - the fixture

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(240)]


def test_jobs_by_state_attempts_and_durations_are_exported(
        launcher: Launcher, runners, tmp_path: Path) -> None:  # noqa: F811
    port, metrics = free_ports(2)
    out = tmp_path / "out"
    runners("r1", port, out)  # the test jobs: sleepy, wordcount of a file
    cfg = tmp_path / "app.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\n'
                   f'runners = ["r1@127.0.0.1:{port}"]\nout = "{out}"\nmax_attempts = 2\n')
    # Job keys are <instance>-<n>, and attempts name Connect sessions, which the one
    # Connect server of the run never forgets: an instance name no other test uses.
    p = launcher.start("tests.services.jobs.spark.pipeline_app:JobsApp", "metrics-app",
                       args=["--config", str(cfg), "--metrics", str(metrics)])

    def jobs(state: str) -> float:
        # Exported once the primary's I/O runs, a moment after it became primary.
        return scrape(metrics).get(("ambrosia_pipeline_jobs", frozenset({("state", state)})),
                                   -1)

    wait_until(lambda: jobs("cancelled") == 1 and jobs("failed") == 1,
               "the cancel and the failure", 120)
    got = scrape(metrics)
    assert [value(got, "ambrosia_pipeline_jobs", state=s)
            for s in ("waiting", "running", "done")] == [0, 0, 0]
    assert value(got, "ambrosia_pipeline_jobs_decided_total") == 2
    assert value(got, "ambrosia_pipeline_job_attempts_total") == 3  # 1 + 2 attempts
    assert value(got, "ambrosia_pipeline_job_duration_seconds_count", outcome="failed") == 1
    assert value(got, "ambrosia_pipeline_job_duration_seconds_sum", outcome="failed") > 0
    assert ("ambrosia_pipeline_job_duration_seconds_count",
            frozenset({("outcome", "done")})) not in got
    p.stop()
