"""The immortals of the failover benchmark through full coordinators (``bench_raft``).

``Counter`` is the replicated server: ``add(i)`` applies request ``i`` (no de-duplication
of its own, so a request applied twice shows in the count). ``Caller`` awaits
``add(1), add(2), ...`` one after another until the file named by ``FO_STOP`` exists, and
appends ``i <wall clock>`` per reply to the file named by ``FO_REPLIES`` (flushed at
once, so the benchmark sees the replies as they come). A reply that is not
``[i, 1 + ... + i]`` (every request applied exactly once, in order) is written as an
``error`` line. The timings live outside the state: nothing here is replayed, since
the caller is never killed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ambrosia_py import Immortal, rpc

SERVER = os.environ.get("FO_SERVER", "fo-counter")


class Counter(Immortal):
    def __init__(self) -> None:
        self.count = 0
        self.total = 0

    @rpc
    async def add(self, i: int) -> list[int]:
        self.count += 1
        self.total += i
        return [self.count, self.total]

    @rpc
    async def read_state(self) -> list[int]:
        return [self.count, self.total]


class Caller(Immortal):
    def __init__(self) -> None:
        self.sent = 0

    async def on_first_start(self) -> None:
        stop = Path(os.environ["FO_STOP"])
        server = self.immortal(SERVER, Counter)
        with open(os.environ["FO_REPLIES"], "a", buffering=1) as out:
            i = 0
            while not stop.exists():
                i += 1
                got = list(await server.add(i))
                out.write(f"{i} {time.time():.6f}\n")
                if got != [i, i * (i + 1) // 2]:
                    out.write(f"error request {i} replied {got}\n")
            self.sent = i
            final = list(await server.read_state())
            if final != [i, i * (i + 1) // 2]:
                out.write(f"error final state {final} after {i} requests\n")
            out.write(f"done {i}\n")
