"""Which event loop runs a binding or a coordinator: uvloop where it is installed, else
asyncio's own.

An await round trip between two immortals crosses four processes, each turning its event
loop once or twice per message; uvloop's turns are cheaper (measured: await p50 about 0.9x
for either side alone, durable forks no worse; see bench/README.md). ``asyncio`` stays
selectable (``--loop asyncio`` or the environment) for platforms without uvloop and for
comparing the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from .errors import UsageError

__all__ = ["LOOPS", "loop_runner", "uvloop_available", "write_unless_closing"]

LOOPS = ("auto", "asyncio", "uvloop")

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def loop_runner(kind: str, *, setting: str) -> Runner:
    """``asyncio.run`` or ``uvloop.run``: ``kind`` is ``auto`` (uvloop if installed),
    ``asyncio`` or ``uvloop``.

    Args:
        setting: where ``kind`` came from (an option or a variable), for the error.

    Raises:
        UsageError: an unknown kind, or uvloop asked for but not installed.
    """
    if kind not in LOOPS:
        raise UsageError(f"unknown event loop {kind!r} in {setting} "
                         f"(expected {', '.join(LOOPS)})")
    if kind == "asyncio" or (kind == "auto" and not uvloop_available()):
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        raise UsageError(f"{setting} asks for uvloop, which is not installed "
                         "(pip install uvloop, or choose asyncio)") from None
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
