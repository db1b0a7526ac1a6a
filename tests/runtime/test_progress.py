"""A replay's progress: a tqdm bar on a terminal, log lines with rate and time left
elsewhere, never both, and nothing at all for a start with no replay."""

from __future__ import annotations

import io
import logging

import pytest

from ambrosia_py.runtime import progress
from ambrosia_py.runtime.progress import ReplayProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress.time, "monotonic", c)
    return c


def test_without_a_terminal_the_log_says_it_every_few_seconds(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    p = ReplayProgress(1000, logging.getLogger("replay"), terminal=False, out=out)
    with caplog.at_level(logging.INFO, logger="replay"):
        p.update(0)
        clock.now += 1.0
        p.update(100)  # not due yet
        clock.now += progress.LOG_EVERY
        p.update(600)
        p.finish(1000)
        p.update(1000)  # after the end: nothing
    assert [r.getMessage() for r in caplog.records] == [
        "replaying the log: 600 of about 1,000 records (60%), 100 records/s, about 4 s left"]
    assert out.getvalue() == ""


def test_on_a_terminal_a_bar_with_rate_and_time_left_and_no_log(
        caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    p = ReplayProgress(2000, logging.getLogger("replay"), terminal=True, out=out)
    with caplog.at_level(logging.INFO, logger="replay"):
        p.update(500)
        p.finish(2000)
    drawn = out.getvalue()
    assert "replaying the log" in drawn and "2.00k/2.00k" in drawn and "100%" in drawn
    assert drawn.endswith("\n")  # the bar's line is closed
    assert caplog.records == []


def test_a_start_with_no_replay_shows_nothing(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    p = ReplayProgress(None, logging.getLogger("replay"), terminal=True, out=out)
    p.finish(0)
    assert out.getvalue() == "" and not p.done
