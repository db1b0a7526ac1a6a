"""A record processor child's plumbing: it dies with the instance's process, and its stderr
reaches the log as it comes, line by line (``StderrLines``)."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
from collections.abc import Callable, Sequence

from .stderr import UNFINISHED_SECONDS, StderrLines

__all__ = ["die_with_parent", "pump_stderr"]


def die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec so that it is killed when the instance's process
    dies, and never outlives (and races) the next life's processor: Linux's
    PR_SET_PDEATHSIG. The C function is looked up here, in the parent: between fork and
    exec only the system call itself runs (no loader lock, no allocation)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    kill = int(signal.SIGKILL)

    def set_parent_death_signal() -> None:  # pragma: no cover - runs in the child
        prctl(1, kill)  # PR_SET_PDEATHSIG

    return set_parent_death_signal


async def pump_stderr(stderr: asyncio.StreamReader | None,
                      say: Callable[[Sequence[str]], None]) -> None:
    """The child's stderr as it comes, to ``say`` one text per line it wrote, as
    ``StderrLines`` cuts it: a line longer than 64 KiB in pieces, and an unfinished line
    once it waited ``UNFINISHED_SECONDS`` for its end (its rest follows)."""
    assert stderr is not None
    loop = asyncio.get_running_loop()
    lines = StderrLines()
    due: float | None = None  # when the unfinished line is logged as it is
    while True:
        try:
            async with asyncio.timeout_at(due):
                chunk = await stderr.read(65536)
        except TimeoutError:
            say(lines.flush())
            due = None
            continue
        if not chunk:
            break
        say(lines.feed(chunk))
        if not lines.unfinished:
            due = None
        elif due is None:
            due = loop.time() + UNFINISHED_SECONDS
    say(lines.close())
