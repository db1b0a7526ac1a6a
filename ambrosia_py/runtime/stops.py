"""SIGTERM and SIGINT as ordinary stops of ``ambrosia run``.

``timeout``, service managers and Ctrl-C signal the whole process group, so the immortal's
coordinator may get the signal too: both stopping is the ordinary case, and whichever side
notices first, the run ends with one line saying the instance stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["EXIT_SIGINT", "StopSignals"]

EXIT_SIGINT = 130  # what a shell expects of a program that Ctrl-C ended
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Records the first SIGTERM or SIGINT and, while the immortal runs, calls ``on_stop``
    on its event loop. A signal before that is only recorded: the caller checks
    ``signum`` between its start-up steps.

    Use as a context manager around the whole run; the previous handlers come back after.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_stop: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for sig in _SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def exit_code(self) -> int:
        """0 for SIGTERM (an ordinary stop, as service managers expect), 130 for SIGINT."""
        return EXIT_SIGINT if self.signum == signal.SIGINT else 0

    def attach(self, loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None]) -> None:
        """From now on a signal calls ``on_stop`` on ``loop`` (at once if one came already)."""
        self._loop, self._on_stop = loop, on_stop
        if self.signum is not None:
            loop.call_soon(on_stop)

    def detach(self) -> None:
        self._loop = self._on_stop = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # a second Ctrl-C changes nothing: the stop is under way
        self.signum = signum
        loop, on_stop = self._loop, self._on_stop
        if loop is not None and on_stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(on_stop)
