"""The long-lived-work sample: a state machine driven by Impulses survives kill -9 and its
checkpoints carry no journal."""

from __future__ import annotations

import pytest

from ambrosia_py.testing import repro
from samples.longwork.longwork import Jobs
from tests.launcher import Launcher

pytestmark = pytest.mark.integration


def test_jobs_finish_once_across_a_kill_9(launcher: Launcher) -> None:
    p = launcher.start("samples.longwork.longwork:Jobs", "jobs")
    p.wait_for("report done at tick 3")
    p.kill()
    p = launcher.start("samples.longwork.longwork:Jobs", "jobs")
    p.wait_for("backup done at tick 5")
    p.stop()
    assert not any("re-dispatching" in line for line in p.lines)  # no journal to rebuild
    assert not any("report done" in line for line in p.lines)  # replayed: quiet
    state = repro("jobs", Jobs, home=launcher.home).state
    assert (state.done, state.left, state.ticks) == (["report", "backup"], {}, 5)
