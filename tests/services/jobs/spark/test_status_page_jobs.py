"""The live status page of a Spark pipeline, in headless chromium: while the pipeline
coordinator runs its jobs on a real runner and Spark, the page shows the jobs' counters and
the recent jobs (a cancelled one, and one that failed on both of its attempts) as the
status file has them, and the job links to the runner."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect, sync_playwright

from ambrosia_core.ports import free_ports
from ambrosia_core.processes import Child
from tests.cli.test_status_page import WAIT_MS, _browser, _cell, _need_chromium
from tests.launcher import ROOT, Launcher, launcher  # noqa: F401 - the fixture

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(240),
              pytest.mark.integration]


def _jobs_ended(status: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        try:
            report = json.loads(status.read_text())
        except (OSError, ValueError):
            report = {}
        jobs = report.get("jobs") or {}
        if jobs.get("cancelled") == 1 and jobs.get("failed") == 1 and not jobs.get("running"):
            return report
        assert time.monotonic() < deadline, f"the jobs did not end: {report}"
        time.sleep(0.2)


def test_the_page_shows_a_pipelines_jobs(launcher: Launcher, runners,  # noqa: F811
                                        tmp_path: Path) -> None:
    _need_chromium()
    (port,) = free_ports(1)
    out = tmp_path / "out"
    runners("r1", port, out)  # the test jobs: sleepy (cancelled), and one that fails
    status = tmp_path / "status.json"
    cfg = tmp_path / "app.toml"
    cfg.write_text(f'listen = "127.0.0.1:0"\nrunners = ["r1@127.0.0.1:{port}"]\n'
                   f'out = "{out}"\nmax_attempts = 2\n'
                   f'status_file = "{status}"\nstatus_seconds = 0.3\n')
    # Job keys name Connect sessions the run's one server keeps: a name no test shares.
    name = "paged-jobs"
    app = launcher.start("tests.services.jobs.spark.pipeline_app:JobsApp", name,
                         args=["--config", str(cfg)])
    server = Child.start(
        [sys.executable, "-m", "ambrosia_cli", "status", "-i", name, "--listen", "0"],
        env=dict(os.environ, AMBROSIA_HOME=str(launcher.home)), cwd=ROOT,
        name="the page server")
    try:
        found = re.search(r"at (http://127\.0\.0\.1:\d+/) ", server.wait_for("http://", 30))
        assert found, server.lines
        report = _jobs_ended(status)
        jobs = report["jobs"]
        recent = {entry[0]: entry for entry in jobs["recent"]}
        assert len(recent) == 2, jobs
        with sync_playwright() as pw:
            browser = _browser(pw, tmp_path / "profile")
            page = browser.new_page()
            page.goto(found.group(1))
            expect(page.locator("#jobs-section")).to_be_visible(timeout=WAIT_MS)
            for column in ("cancelled", "failed", "attempts", "decided"):
                expect(_cell(page, "jobs", "counters", column)).to_have_text(
                    str(jobs[column]), timeout=WAIT_MS)
            for key, entry in recent.items():
                expect(_cell(page, "recent-jobs", key, "phase")).to_have_text(str(entry[1]))
                expect(_cell(page, "recent-jobs", key, "attempts")).to_have_text(
                    str(entry[2]))
            # The job links' section: the runner, linked.
            expect(page.locator("#sections")).to_contain_text("r1")
            browser.close()
    finally:
        server.kill()
        app.kill()
