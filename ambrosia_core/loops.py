"""How a binding or a coordinator runs: on uvloop where it is installed (a dependency
everywhere but Windows), else asyncio's own loop, and with a short scheduler slice where
the kernel takes one. Neither is a setting: an await round trip between two immortals
crosses four processes, each turning its event loop once or twice per message, and both
choices were measured to make that cheaper (bench/README.md), never dearer.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import platform
import random
import struct
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

__all__ = ["DEFAULT_SLICE_US", "Backoff", "loop_runner", "shorten_slice", "said_at",
           "uvloop_available", "write_unless_closing"]

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def loop_runner() -> Runner:
    """``uvloop.run`` where uvloop is installed, else ``asyncio.run``."""
    if not uvloop_available():
        return asyncio.run
    import uvloop

    run: Runner = uvloop.run
    return run


class _Writable(Protocol):
    def is_closing(self) -> bool: ...

    def write(self, data: bytes | bytearray | memoryview) -> None: ...


def write_unless_closing(stream: _Writable, data: bytes | bytearray | memoryview) -> None:
    """``stream.write(data)`` (a transport or a ``StreamWriter``), dropped if the
    connection is closing or closed, on either loop.

    asyncio's transports drop such a write (and ``drain()`` then raises
    ``ConnectionResetError``); uvloop's raise ``RuntimeError`` instead. A peer can close
    a connection between any two callbacks, so every write to a socket goes through here
    and the loss is noticed where it always was: the reader's end of file, or ``drain()``.
    """
    if not stream.is_closing():
        stream.write(data)


# --------------------------------------------------------------------- scheduler slice
DEFAULT_SLICE_US = 100
# sched_setattr / sched_getattr system call numbers by machine.
_SCHED_CALLS = {"x86_64": (314, 315), "aarch64": (274, 275), "arm64": (274, 275)}
# struct sched_attr (56 bytes): size, policy, flags, nice, priority, runtime, deadline,
# period, util_min, util_max.
_SCHED_ATTR = struct.Struct("IIQiIQQQII")
_SCHED_OTHER = 0
_SCHED_FLAG_RESET_ON_FORK = 0x01


def shorten_slice(us: int = DEFAULT_SLICE_US) -> bool:
    """Ask the kernel to run this process in slices of ``us`` microseconds; whether it did.

    An await round trip wakes four processes one after another. On a busy machine each
    wake-up may wait for whatever holds the CPU to finish its slice (1.4 ms by default
    here); Linux's EEVDF scheduler (6.12 and later) lets a task ask for a shorter slice,
    with which a woken task preempts sooner, without more CPU time overall (measured:
    bench/README.md). Only ordinary (SCHED_OTHER) processes are changed,
    keeping their nice value; anywhere the call does not exist, is refused or is ignored,
    nothing changes. Processes it starts later get the kernel's slice again.
    """
    calls = _SCHED_CALLS.get(platform.machine())
    if us <= 0 or calls is None or not hasattr(os, "getpriority"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(_SCHED_ATTR.size)
        if libc.syscall(calls[1], 0, buf, _SCHED_ATTR.size, 0) != 0:
            return False
        attr = list(_SCHED_ATTR.unpack(buf.raw))
        if attr[1] != _SCHED_OTHER:
            return False  # real-time, batch or idle: someone chose that on purpose
        # Children start with the kernel's slice: a Spark JVM or a record processor a
        # service starts is throughput work, not a hop of a call.
        attr[0], attr[2], attr[5] = (_SCHED_ATTR.size, attr[2] | _SCHED_FLAG_RESET_ON_FORK,
                                     us * 1000)
        new = ctypes.create_string_buffer(_SCHED_ATTR.pack(*attr), _SCHED_ATTR.size)
        if libc.syscall(calls[0], 0, new, 0) != 0:
            return False
        if libc.syscall(calls[1], 0, buf, _SCHED_ATTR.size, 0) != 0:
            return False
        return bool(_SCHED_ATTR.unpack(buf.raw)[5] == us * 1000)
    except (OSError, AttributeError):
        return False


class Backoff:
    """The waits between attempts at something that keeps failing (a connection, a
    refused transaction), one policy for every process: the wait doubles from ``floor``
    up to ``cap`` with each failure in a row, each drawn in the upper half of its value
    (so peers that failed together do not retry together), and goes back to ``floor``
    only on ``progress()``, real progress rather than a mere connect, so a refusal right
    after connecting does not become a tight loop. ``worth_saying`` tells a caller to log
    the first failure of a streak and then only its 10th, 100th, ..., not every attempt.

    Args:
        floor: the first wait, in seconds (at most ``cap``).
        cap: the longest wait, in seconds.
        rng: where the jitter comes from (a seeded one in tests).
    """

    __slots__ = ("cap", "failures", "floor", "rng")

    def __init__(self, floor: float = 0.05, cap: float = 5.0,
                 rng: random.Random | None = None) -> None:
        if not (floor > 0 and cap > 0):
            raise ValueError(f"a back-off needs a floor and a cap above 0, got {floor} and "
                             f"{cap}")
        self.floor = min(floor, cap)  # a cap below the floor is the floor too
        self.cap = cap
        self.rng = rng if rng is not None else random.Random()
        self.failures = 0  # in a row, since the last progress

    def failed(self) -> float:
        """One more failure: the seconds to wait before the next attempt."""
        full = min(self.cap, self.floor * 2 ** min(self.failures, 60))
        self.failures += 1
        return full / 2 + self.rng.uniform(0, full / 2)

    def progress(self) -> None:
        """Real progress was made: the next failure starts a new streak at ``floor``."""
        self.failures = 0

    @property
    def worth_saying(self) -> bool:
        """Whether the failure just counted deserves a log line (``said_at``)."""
        return said_at(self.failures)


def said_at(n: int) -> bool:
    """Whether the ``n``-th failure in a row deserves a log line: the first of a streak,
    then the 10th, 100th, 1000th, ... (the rest are counted, not said)."""
    return n == 1 or (n >= 10 and str(n).rstrip("0") == "1")
