"""Choosing free TCP ports for coordinators, connectors and tests.

A port chosen now and listened on later must not be taken in between. Asking the kernel
for port 0 hands out a port from its ephemeral range, the same range every outgoing
connection on the machine draws its local port from: on a busy machine some connection
can take the port in the second before the coordinator listens, or while it is down
between two runs (a registered instance keeps its ports for good), and the coordinator
then fails with "Address already in use". So ports are drawn at random from below the
ephemeral range (where only programs that ask for a port by number go), and each is
checked by binding it, all of them held together while chosen.

Processes that choose ports side by side (a test suite's parallel workers) can still draw
the same port in the moment between choosing it and listening on it: each may be given a
slice of its own to draw from, as ``AMBROSIA_PORTS=LOW-HIGH`` (``tests/conftest.py`` gives
each worker one; the processes it starts inherit it).
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

__all__ = ["PORTS_ENV", "drawn_range", "ephemeral_range", "free_ports"]

PORTS_ENV = "AMBROSIA_PORTS"

# The lowest port drawn: under it are the registered ports of well-known servers.
LOWEST = 15000
# Below this many candidates under the ephemeral range, the kernel chooses instead.
MIN_CANDIDATES = 2000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Its own generator: a test that seeds the module's cannot make two processes draw alike.
_draw = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (Linux's default where
    it cannot be read)."""
    try:
        lo, hi = (int(v) for v in _EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return lo, hi


def drawn_range() -> tuple[int, int]:
    """The ports drawn from, ``[low, high)``: those from ``LOWEST`` up to the ephemeral
    range, narrowed to the slice ``AMBROSIA_PORTS`` gives if it is set (never into the
    ephemeral range).

    Raises:
        ValueError: ``AMBROSIA_PORTS`` is not ``LOW-HIGH`` with 1 <= LOW < HIGH <= 65536.
    """
    low, high = LOWEST, ephemeral_range()[0]
    value = os.environ.get(PORTS_ENV)
    if not value:
        return low, high
    try:
        first, end = (int(v) for v in value.split("-"))
    except ValueError:
        raise ValueError(f"{PORTS_ENV}={value!r}: expected LOW-HIGH, e.g. 15000-21000"
                         ) from None
    if not 1 <= first < end <= 65536:
        raise ValueError(f"{PORTS_ENV}={value!r}: expected 1 <= LOW < HIGH <= 65536")
    return max(low, first), min(high, end)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` now, outside the ephemeral range where the
    machine allows it (held open together while chosen; from ``drawn_range``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low, high = drawn_range()
    socks: list[socket.socket] = []
    try:
        if high - low >= MIN_CANDIDATES:
            tried: set[int] = set()
            while len(socks) < n and len(tried) < high - low:
                port = _draw.randrange(low, high)
                if port in tried:
                    continue
                tried.add(port)
                s = socket.socket(family)
                try:
                    s.bind((host, port))  # no SO_REUSEADDR: a port in TIME_WAIT is not free
                except OSError:
                    s.close()
                    continue
                socks.append(s)
        while len(socks) < n:  # the kernel's choice, where there is no room below
            s = socket.socket(family)
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
