"""The Spark Connect server's start-up: a bar of the seconds waited against the last
start's on a terminal, nothing elsewhere, and the seconds of each start kept."""

from __future__ import annotations

import io
from pathlib import Path

from ambrosia_services.jobs.spark.server import StartProgress


def test_the_first_start_counts_seconds_and_the_next_has_a_time_left(tmp_path: Path) -> None:
    record = tmp_path / "connect-server.startup"
    out = io.StringIO()
    first = StartProgress(record, terminal=True, out=out, redraw=0)
    assert first.last() is None
    first.tick(1.0)
    first.tick(3.2)
    first.done(17.5)
    assert "starting Spark Connect: 3.2 s (the first start: no time left known)" in out.getvalue()
    assert record.read_text() == "17.5\n"

    out = io.StringIO()
    second = StartProgress(record, terminal=True, out=out, redraw=0)
    assert second.last() == 17.5
    second.tick(5.0)
    drawn = out.getvalue()
    assert "starting Spark Connect:" in drawn and "5.0/17.5 s, about 00:" in drawn
    second.done(None)  # a start that failed keeps the last good one
    assert record.read_text() == "17.5\n"


def test_without_a_terminal_nothing_is_drawn_but_the_seconds_are_kept(tmp_path: Path) -> None:
    record = tmp_path / "connect-server.startup"
    record.write_text("not a number\n")
    out = io.StringIO()
    quiet = StartProgress(record, terminal=False, out=out)
    assert quiet.last() is None
    quiet.tick(2.0)
    quiet.done(9.25)
    assert out.getvalue() == "" and record.read_text() == "9.2\n"
