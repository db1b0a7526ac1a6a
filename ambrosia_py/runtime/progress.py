"""A recovery's replay progress: a bar with rate and time left on a terminal (tqdm), and a
line in the log every few seconds anywhere else, never both.

The total is an estimate (``ambrosia run`` counts the records in the log files before
the coordinator starts); without one the progress is a count and a rate.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["LOG_EVERY", "ReplayProgress", "progress_line"]

LOG_EVERY = 5.0  # seconds between progress lines in the log
_DRAW_EVERY = 0.25  # seconds between redraws of the bar


def progress_line(done: int, total: int | None, elapsed: float) -> str:
    """One log line of replay progress: the count, the rate and, with a total, the share
    done and about how long is left."""
    rate = done / elapsed if elapsed > 0 else 0.0
    if not total:
        return f"replaying the log: {done:,} records, {rate:,.0f} records/s"
    frac = min(done / total, 1.0)
    left = max(total - done, 0) / rate if rate > 0 else None
    eta = "" if left is None else f", about {left:,.0f} s left"
    return (f"replaying the log: {done:,} of about {total:,} records ({frac:.0%}), "
            f"{rate:,.0f} records/s{eta}")


class ReplayProgress:
    """Shows how far a replay has got.

    Args:
        total: about how many records the replay holds, if known.
        log: where the lines go when no bar is drawn.
        terminal: draw a bar on ``out`` (default: when ``out`` is a terminal).
        out: the stream the bar is drawn on (stderr).
    """

    def __init__(self, total: int | None, log: logging.Logger | logging.LoggerAdapter[
            logging.Logger], *, terminal: bool | None = None,
                 out: TextIO | None = None) -> None:
        self.total = total
        self.log = log
        self.out = sys.stderr if out is None else out
        self.terminal = self.out.isatty() if terminal is None else terminal
        self._bar: tqdm[None] | None = None
        self._start: float | None = None
        self._last_line = 0.0
        self.done = False

    def update(self, replayed: int) -> None:
        """``replayed`` records so far (called often: cheap when nothing is due)."""
        if self.done:
            return
        now = time.monotonic()
        if self._start is None:
            self._start = self._last_line = now
        if self.terminal:
            if self._bar is None:
                from tqdm import tqdm  # only a replay shown on a terminal loads it

                self._bar = tqdm(total=self.total, desc="replaying the log", unit=" records",
                                 unit_scale=True, file=self.out, mininterval=_DRAW_EVERY,
                                 leave=True, dynamic_ncols=True)
            self._bar.update(replayed - self._bar.n)
        elif now - self._last_line >= LOG_EVERY:
            self._last_line = now
            self.log.info("%s", progress_line(replayed, self.total, now - self._start))

    def finish(self, replayed: int) -> None:
        """The replay ended: the bar's line is closed (at the count reached). Before any
        ``update`` there was no replay to finish: nothing happens."""
        if self.done or self._start is None:
            return
        self.done = True
        if self._bar is not None:
            self._bar.update(replayed - self._bar.n)
            self._bar.close()
