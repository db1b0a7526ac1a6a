"""Active/active failover time against a restart-based failover of the same workload.

A client instance streams numbered calls (one every 2 ms) to a server instance. Each
repetition kills the server's primary with SIGKILL and measures the time from the kill
to the moment the new primary's binding receives the first record holding a new client
call. Active/active: three replicas (a primary, the checkpointing secondary, a
standby that takes over; the killed replica is restarted as a standby). Baseline: a
standalone server whose coordinator and binding are restarted right after the kill
(what a supervisor would do) and recover from the log. Ratio = baseline / failover
(how many times faster active/active recovers).
"""

from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ambrosia_core.wire import Rpc  # noqa: E402
from tests.activeactive.cluster import Cluster  # noqa: E402
from tests.ic.conftest import Harness, wait_until  # noqa: E402
from tests.ic.rawbinding import CounterApp, Driver  # noqa: E402


def _first_call_after(d: Driver, mark: str) -> float:
    def found() -> float | None:
        start = d.marks.get(mark)
        if start is None:
            return None
        for i in range(start, len(d.parsed)):
            if any(isinstance(m, Rpc) and m.method_id == 1 for m in d.parsed[i].messages):
                return d.times[i]
        return None

    return float(wait_until(found, "the first new call", 60))


def _active_active(h: Harness, kills: int) -> list[float]:
    cl = Cluster(h)
    cl.start_replica(0)
    wait_until(cl.drivers[0].primary.is_set, "first start")
    cl.start_replica(1)
    cl.start_replica(2)
    cl.start_client()
    cl.start_pump()
    out = []
    primary = 0
    try:
        for _ in range(kills):
            at = len(cl.received_by(primary))
            wait_until(lambda p=primary, a=at: len(cl.received_by(p)) > a + 20, "load")
            t0 = time.monotonic()
            cl.procs[primary].send_signal(signal.SIGKILL)
            cl.procs[primary].wait()
            new = cl.wait_primary(not_=primary)
            out.append(_first_call_after(cl.drivers[new], "becoming-primary") - t0)
            cl.drivers[primary].thread.join(30)
            cl.start_replica(primary)
            wait_until(lambda p=primary: "checkpoint-loaded" in cl.drivers[p].events, "standby")
            primary = new
    finally:
        cl.stop_pump()
    cl.check_exactly_once(primary)
    return out


def _restart(h: Harness, kills: int) -> list[float]:
    h.register("S")
    h.register("C")
    procs = {"S": h.start("S")}
    server = h.drive("S")
    wait_until(server.primary.is_set, "server primary")
    # Cluster's pump and checks, without its replica set.
    cl = Cluster.__new__(Cluster)
    cl.h, cl.sent, cl.procs, cl.drivers = h, 0, {}, {0: server}
    cl._stop, cl._pump = threading.Event(), None
    cl.start_client()
    cl.start_pump()
    out = []
    try:
        for _ in range(kills):
            at = len(server.snapshot()["received"])
            wait_until(lambda a=at, s=server: len(s.snapshot()["received"]) > a + 20, "load")
            t0 = time.monotonic()
            procs["S"].send_signal(signal.SIGKILL)
            procs["S"].wait()
            server.b.close()
            procs["S"] = h.start("S")
            server = Driver(h.connect("S"), CounterApp("S")).start()
            cl.drivers[0] = server
            out.append(_first_call_after(server, "take-becoming-primary-checkpoint") - t0)
    finally:
        cl.stop_pump()
    cl.check_exactly_once(0)
    return out


def _spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs)


def run(quick: bool) -> list[dict[str, Any]]:
    kills = 3 if quick else 8
    results: dict[str, list[float]] = {}
    for name, fn in (("aa", _active_active), ("restart", _restart)):
        with tempfile.TemporaryDirectory() as tmp:
            h = Harness(Path(tmp))
            try:
                results[name] = fn(h, kills)
            finally:
                h.close()
    aa, base = results["aa"], results["restart"]
    m_aa, m_base = statistics.median(aa), statistics.median(base)
    return [
        {"name": "baseline: kill -9, restart coordinator + binding, recover",
         "value": m_base, "unit": "s", "baseline": None, "ratio": None,
         "spread": _spread(base), "extra": {"samples": base}},
        {"name": "active/active failover: kill -9 of the primary -> new primary's "
                 "first new call", "value": m_aa, "unit": "s", "baseline": m_base,
         "ratio": m_base / m_aa, "spread": _spread(aa),
         "extra": {"samples": aa, "max": max(aa), "goal": "< 1 s"}},
    ]


if __name__ == "__main__":  # pragma: no cover
    for row in run("--quick" in sys.argv):
        print(row)
