"""The connectors sample as a user runs it: the feed, the coordinator and the file sink
as processes, the coordinator and the sink killed with kill -9 part-way."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.launcher import ROOT

pytestmark = pytest.mark.integration


def test_the_connectors_sample_commits_every_line_once_through_kill_9() -> None:
    out = subprocess.run([sys.executable, "samples/connectors/run_sample.py", "500"],
                         cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == (
        "connectors: 2 streams, 3000 lines, each committed exactly once, in order, through "
        "kill -9 of the coordinator and of the sink")
    assert "it recovered from its log" in out.stdout
