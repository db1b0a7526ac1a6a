"""Choosing free TCP ports for coordinators, connectors and tests.

A port chosen now and listened on later must not be taken in between. Asking the kernel
for port 0 hands out a port from its ephemeral range, the same range every outgoing
connection on the machine draws its local port from: on a busy machine some connection
can take the port in the second before the coordinator listens, or while it is down
between two runs (a registered instance keeps its ports for good), and the coordinator
then fails with "Address already in use". So ports are drawn at random from below the
ephemeral range (where only programs that ask for a port by number go), and each is
checked by binding it, all of them held together while chosen.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["ephemeral_range", "free_ports"]

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


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` now, outside the ephemeral range where the
    machine allows it (held open together while chosen)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    lo, _ = ephemeral_range()
    socks: list[socket.socket] = []
    try:
        if lo - LOWEST >= MIN_CANDIDATES:
            tried: set[int] = set()
            while len(socks) < n and len(tried) < lo - LOWEST:
                port = _draw.randrange(LOWEST, lo)
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
