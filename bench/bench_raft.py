"""The log in a ØMQ RAFT cluster (three zmq-raft peers on 127.0.0.1) beside local files.

- durable appends: 100-byte records submitted 64 at a time through the store's group
  commit, each batch one Raft entry that counts only after the writer read the log up
  to it (the fencing check). Baseline: the same batches appended to a local log file
  with one fsync each, as a standalone coordinator writes. Ratio = raft / local.
- failover: a primary process is killed with SIGKILL while it appends; the time until a
  standby that was following holds the next epoch. Raft: the standby claims once the
  primary was silent past the lease (``LEASE``) and its claim is in the log (a bare store
  process: no link server, so no watch, unlike the coordinators below). Baseline:
  the same with epoch files in a local directory, where the kernel frees the dead
  holder's flock at once. Ratio = local / raft (below 1: raft takes over more slowly).
- failover through coordinators (``failover_procs``): a three-replica active/active
  instance (``ambrosia ic --replica N`` + ``ambrosia run`` each) answering a caller
  immortal that awaits one call after another; ``kill -9`` of the primary's coordinator,
  and separately of its binding; the time from the kill to the first reply from the new
  primary, every request checked applied exactly once. The log in the cluster (with
  the default lease, and with a 300 ms one) against local files, in the same run;
  ratio = local / raft. ``extra`` splits the Raft takeover: the silence the standby
  waited (0 when its watch saw the primary's process end, or the primary resigned),
  the claim's round trips, reading the log up to the claim, and the rest (the binding
  becoming primary, the caller's link moving, the first call).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "ic-harness"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import failover_procs  # noqa: E402
from ambrosia_ic.lease import Epochs  # noqa: E402
from ambrosia_ic.logstore import LogWriter  # noqa: E402
from ambrosia_ic.logstore.raft_store import LEASE, RaftGroupCommit, RaftLogStore  # noqa: E402
from ambrosia_ic.raft.cluster import LocalCluster  # noqa: E402

BATCH = 64
SHORT_LEASE_MS = 300
_ACCOUNT = re.compile(r"(?:silent ([\d.]+) s|resigned|process ended).*claim ([\d.]+) ms, "
                      r"log up to the claim ([\d.]+) ms")
RECORD = b"r" * 100


def _spread(xs: list[float]) -> float:
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m else 0.0


def _result(name: str, unit: str, values: list[float], base: list[float],
            invert: bool = False) -> dict[str, Any]:
    v, b = statistics.median(values), statistics.median(base)
    ratio = (b / v if invert else v / b) if v and b else None
    return {"name": name, "value": v, "unit": unit, "baseline": b, "ratio": ratio,
            "spread": _spread(values)}


async def _raft_appends(c: LocalCluster, seconds: float) -> float:
    store = RaftLogStore(c.address, f"bench-{os.getpid()}-{time.monotonic_ns()}")
    try:
        assert await store.claim({"replica": 0})
        group = RaftGroupCommit(store)
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            await asyncio.gather(*(group.submit(RECORD) for _ in range(BATCH)))
            n += BATCH
        rate = n / (time.perf_counter() - start)
        await group.close()
        return rate
    finally:
        store.close()


def _local_appends(d: Path, seconds: float) -> float:
    w = LogWriter(d / "serverlog1")
    try:
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            w.write(RECORD * BATCH)
            w.sync()
            n += BATCH
        return n / (time.perf_counter() - start)
    finally:
        w.close()


_HOLDER = """
import sys, time
sys.path[:0] = [{root!r}, {harness!r}]
from ambrosia_ic.lease import Epochs
e = Epochs(__import__('pathlib').Path({d!r}))
assert e.claim(1, {{"replica": 1}})
print("held", flush=True)
while True:
    e.beat(); time.sleep(0.05)
"""


def _local_failover(d: Path) -> float:
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER.format(
        root=str(ROOT), harness=str(ROOT / "ic-harness"), d=str(d))],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().startswith("held")
    standby = Epochs(d)
    t0 = time.perf_counter()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    while not (standby.holder_gone(1) and standby.claim(2, {"replica": 2})):
        time.sleep(0.005)  # the replica's poll interval
    took = time.perf_counter() - t0
    standby.close()
    return took


def _raft_failover(c: LocalCluster) -> float:
    name = f"bench-fo-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "ic-harness"), os.environ.get("PYTHONPATH", "")])}
    primary = subprocess.Popen(
        [sys.executable, "-m", "tests.raft.replica_worker", c.address, name, "1", "100000000"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert primary.stdout is not None and primary.stdout.readline().startswith("primary")

    async def standby() -> float:
        store = RaftLogStore(c.address, name)
        try:
            for _ in range(20):  # follow while the primary appends
                await store.catch_up()
                await asyncio.sleep(0.02)
            t0 = time.perf_counter()
            primary.send_signal(signal.SIGKILL)
            primary.wait()
            while True:
                await store.catch_up()
                if store.silent_for() > LEASE and await store.claim({"replica": 2}):
                    return time.perf_counter() - t0
                await store.wait(0.05)
        finally:
            store.close()

    try:
        return asyncio.run(standby())
    finally:
        primary.kill()
        primary.wait()


def _split(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of where the Raft takeovers' time went (from the new primary's account)."""
    parts: dict[str, list[float]] = {"lease_wait_s": [], "claim_s": [], "read_to_claim_s": [],
                                     "rest_s": []}
    for s in samples:
        m = _ACCOUNT.search(s["account"])
        if m is None:
            continue
        # A primary that resigned (its binding died) left no lease to wait out.
        silent = float(m[1]) if m[1] else 0.0
        claim, read = float(m[2]) / 1000, float(m[3]) / 1000
        parts["lease_wait_s"].append(silent)
        parts["claim_s"].append(claim)
        parts["read_to_claim_s"].append(read)
        parts["rest_s"].append(s["seconds"] - silent - claim - read)
    return {k: round(statistics.median(v), 4) for k, v in parts.items() if v}


def _through_coordinators(tmp: Path, cluster: LocalCluster, quick: bool
                          ) -> list[dict[str, Any]]:
    kills = ["coordinator", "binding"] * (1 if quick else 3)
    runs = {
        "local": failover_procs.measure(tmp / "fo-local", "", kills),
        "raft": failover_procs.measure(tmp / "fo-raft", cluster.address, kills),
        "short": failover_procs.measure(tmp / "fo-short", cluster.address, kills,
                                        lease_ms=SHORT_LEASE_MS),
    }
    out = []
    for what in ("coordinator", "binding"):
        local = [s["seconds"] for s in runs["local"][what]]
        for run_name, label in (("raft", "lease 1 s"), ("short", f"lease {SHORT_LEASE_MS} ms")):
            samples = runs[run_name][what]
            row = _result(f"failover through coordinators, kill -9 of the primary's {what} "
                          f"-> first reply, Raft log ({label}) (vs local files)", "s",
                          [s["seconds"] for s in samples], local, invert=True)
            row["extra"] = {"samples": [round(s["seconds"], 4) for s in samples],
                            "local_samples": [round(x, 4) for x in local],
                            "takeover": _split(samples),
                            "requests_checked": runs[run_name]["requests"],
                            "local_requests_checked": runs["local"]["requests"]}
            out.append(row)
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 2 if quick else 5
    seconds = 0.5 if quick else 2.0
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "raft", 3)
        cluster.start()
        try:
            raft_rates = [asyncio.run(_raft_appends(cluster, seconds)) for _ in range(repeats)]
            local_rates = []
            for i in range(repeats):
                d = Path(tmp) / f"local{i}"
                d.mkdir()
                local_rates.append(_local_appends(d, seconds))
            raft_fo = [_raft_failover(cluster) for _ in range(repeats)]
            local_fo = [_local_failover(Path(tmp) / f"epochs{i}") for i in range(repeats)]
            through = _through_coordinators(Path(tmp), cluster, quick)
        finally:
            cluster.stop()
    return [
        _result("durable appends, log in a 3-peer Raft cluster (vs local file + fsync)",
                "records/s", raft_rates, local_rates),
        _result("failover, kill -9 of the primary to the standby's epoch (vs local epochs)",
                "s", raft_fo, local_fo, invert=True),
        *through,
    ]


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        print(r)
