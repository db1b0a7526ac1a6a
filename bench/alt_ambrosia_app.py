"""The AMBROSIA contender's immortals: the counter workload as a client and a server immortal.

Run by ``bench_alternatives.run_ambrosia`` through ``ambrosia run`` (each immortal with its own
coordinator).  The client reads its sizes from ``ALT_REQUESTS`` / ``ALT_WARMUP``, drives the
same checked workload as the other contenders (every reply, three retried ids, the final
state) with ``await server.add(...)``, and logs one ``ALT_RESULT <json>`` line.  Timings are
taken outside the immortal's state, so they do not affect replay.
"""

from __future__ import annotations

import json
import os
import time

from ambrosia_py import Immortal, rpc

SERVER = os.environ.get("ALT_SERVER", "alt-counter-server")
RESULT_TAG = "ALT_RESULT "


class CounterServer(Immortal):
    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.replies: dict[int, list[int]] = {}

    @rpc
    async def add(self, request_id: int, amount: int) -> list[int]:
        reply = self.replies.get(request_id)
        if reply is None:
            self.count += 1
            self.total += amount
            reply = [self.count, self.total]
            self.replies[request_id] = reply
        return reply

    @rpc
    async def read_state(self) -> list[int]:
        return [self.count, self.total]


def _expected(last_id: int) -> list[int]:
    return [last_id, last_id * (last_id + 1) // 2]


class CounterClient(Immortal):
    def __init__(self) -> None:
        self.done = False

    async def on_first_start(self) -> None:
        requests = int(os.environ.get("ALT_REQUESTS", "50"))
        warmup = int(os.environ.get("ALT_WARMUP", "5"))
        server = self.immortal(SERVER, CounterServer)
        errors: list[str] = []
        replies: dict[int, list[int]] = {}
        for i in range(1, warmup + 1):
            replies[i] = list(await server.add(i, i))
        last = warmup + requests
        latencies: list[int] = []
        clock = time.perf_counter_ns
        started = clock()
        for i in range(warmup + 1, last + 1):
            t0 = clock()
            replies[i] = list(await server.add(i, i))
            latencies.append(clock() - t0)
        elapsed = (clock() - started) / 1e9
        for i in range(1, last + 1):
            if replies[i] != _expected(i):
                errors.append(f"request {i} replied {replies[i]}")
        retried = sorted({1, max(1, last // 2), last})
        for i in retried:
            again = list(await server.add(i, i))
            if again != replies[i]:
                errors.append(f"retried request {i} replied {again}, first {replies[i]}")
        final = list(await server.read_state())
        if final != _expected(last):
            errors.append(f"final state {final}, expected {_expected(last)}")
        self.done = True
        result = {
            "contender": "ambrosia",
            "requests": requests,
            "elapsed_s": elapsed,
            "latencies_ns": latencies,
            "final_state": final,
            "retries_checked": len(retried),
            "errors": errors,
        }
        self.ctx.log.info("%s%s", RESULT_TAG, json.dumps(result))
