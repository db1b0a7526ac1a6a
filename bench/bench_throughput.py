"""Durable RPCs between two immortals, each with its own coordinator: fork throughput,
async/await latency, and the memory the processes use.

Four processes on 127.0.0.1: the sink's coordinator (``ambrosia ic``) and binding
(``ambrosia run bench_throughput:Sink --receive-port ... --send-port ...``), the
same for the source. The source awaits ``sink.echo(i)`` PINGS times one after another
(latency), then forks ``sink.take(i, payload)`` FORKS times in bursts of BURST, awaiting one
``echo`` after each burst (flow control), and finally reads ``sink.total()``: every fork
must have been applied exactly once. Every call is logged and fsynced by the receiving
coordinator before it is delivered (group commit packs a burst into few records).

Ceiling, measured in the same run: the plain-Python four-process pipeline of
``ceilings.pipeline_rate`` (the same bytes, a msgpack envelope per call, group-commit
fsync at the receiver). Baselines, also in the same run, over a plain loopback TCP
socket carrying the same bytes: bursts of the same encoded Rpc frames with a one-byte ack
per burst (throughput), and a ping-pong of the echo call's request and reply sizes (latency).

Memory: resident set size (VmRSS) of the sink's coordinator and binding at rest (primary,
before the load) and their peak (VmHWM) after it, against a bare Python interpreter.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambrosia_core.processes import Child, stop_process
from ambrosia_py import Immortal, fork, rpc

HERE = Path(__file__).resolve().parent
SINK = "bench-sink"
SOURCE = "bench-source"
RESULT = "BENCH_RPC_RESULT "
PAYLOAD = 64


class Sink(Immortal):
    def __init__(self) -> None:
        self.count = 0
        self.total_bytes = 0
        self.last = -1
        self.out_of_order = 0

    @fork
    def take(self, i: int, payload: bytes) -> None:
        if i != self.last + 1:
            self.out_of_order += 1
        self.last = i
        self.count += 1
        self.total_bytes += len(payload)

    @rpc
    async def echo(self, i: int) -> int:
        return i

    @rpc
    async def total(self) -> list[int]:
        return [self.count, self.total_bytes, self.out_of_order]


class Source(Immortal):
    def __init__(self) -> None:
        self.forks = int(os.environ.get("BENCH_FORKS", "1000"))
        self.burst = int(os.environ.get("BENCH_BURST", "200"))
        self.pings = int(os.environ.get("BENCH_PINGS", "100"))
        self.done = False

    async def on_first_start(self) -> None:
        # Timings are taken outside the state (nothing here is replayed in a benchmark).
        clock = time.perf_counter_ns
        sink = self.immortal(SINK, Sink)
        errors: list[str] = []
        for i in range(20):  # warm-up: both links up
            await sink.echo(-i)
        latencies = []
        for i in range(self.pings):
            t0 = clock()
            got = await sink.echo(i)
            latencies.append(clock() - t0)
            if got != i:
                errors.append(f"echo({i}) returned {got}")
        payload = bytes(PAYLOAD)
        sent = 0
        t0 = clock()
        while sent < self.forks:
            for _ in range(min(self.burst, self.forks - sent)):
                sink.take(sent, payload)
                sent += 1
            await sink.echo(sent)
        count, nbytes, disorder = await sink.total()
        elapsed = (clock() - t0) / 1e9
        if [count, nbytes, disorder] != [self.forks, self.forks * PAYLOAD, 0]:
            errors.append(f"sink total {[count, nbytes, disorder]}, expected "
                          f"{[self.forks, self.forks * PAYLOAD, 0]}")
        self.done = True
        self.ctx.log.info("%s%s", RESULT, json.dumps(
            {"forks": self.forks, "elapsed_s": elapsed, "latencies_ns": latencies,
             "errors": errors}))


# ---------------------------------------------------------------------------- processes
def _rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


class _Pair:
    """A coordinator and a binding for one instance, their stderr in files."""

    def __init__(self, name: str, target: str, home: Path, env: dict[str, str],
                 options: Sequence[str] = ()) -> None:
        from ambrosia_ic import launch, registry

        reg = registry.load(name, home)
        self.err = open(home / f"{name}-ic.err", "w")  # noqa: SIM115 - closed in stop()
        self.coordinator = launch.start_coordinator(name, env=env, stderr=self.err,
                                                    options=options)
        self.binding = Child(subprocess.Popen(
            [sys.executable, "-m", "ambrosia_cli", "run", target, "-i", name,
             "--receive-port", str(reg.receive_port), "--send-port",
             str(reg.send_port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env, cwd=HERE, text=True), name=f"the binding of {name}", group=False)

    def wait_for(self, text: str, timeout: float) -> str:
        return self.binding.wait_for(text, timeout)

    def stop(self) -> None:
        self.binding.stop(20)
        stop_process(self.coordinator, 20, group=False)
        for f in (self.coordinator.stdout, self.coordinator.stderr):
            if f is not None:
                f.close()
        self.err.close()


def run_immortals(forks: int, burst: int, pings: int,
                  options: Sequence[str] = ()) -> dict[str, Any]:
    """One run of the workload; the source's result plus memory figures (kB).
    ``options`` go to both coordinators (``bench_tls``: TLS on their link)."""
    from ambrosia_ic import registry

    from ambrosia_core.ports import free_ports

    with tempfile.TemporaryDirectory(prefix="bench-rpc-") as tmp:
        home = Path(tmp)
        env = dict(os.environ, AMBROSIA_HOME=str(home), PYTHONUNBUFFERED="1",
                   BENCH_FORKS=str(forks), BENCH_BURST=str(burst), BENCH_PINGS=str(pings))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p)
        for name in (SINK, SOURCE):
            rp, sp, icp = free_ports(3)
            registry.register(instance_name=name, receive_port=rp, send_port=sp, ic_port=icp,
                              log_dir=str(home / "logs"), home=home)
        pairs = []
        try:
            sink = _Pair(SINK, "bench_throughput:Sink", home, env, options)
            pairs.append(sink)
            sink.wait_for("became primary", 60)
            time.sleep(0.5)
            rest = {"coordinator": _rss_kb(sink.coordinator.pid, "VmRSS"),
                    "binding": _rss_kb(sink.binding.pid, "VmRSS")}
            source = _Pair(SOURCE, "bench_throughput:Source", home, env, options)
            pairs.append(source)
            line = source.wait_for(RESULT, 600)
            peak = {"coordinator": _rss_kb(sink.coordinator.pid, "VmHWM"),
                    "binding": _rss_kb(sink.binding.pid, "VmHWM")}
        finally:
            for p in reversed(pairs):
                p.stop()
    result: dict[str, Any] = json.loads(line.split(RESULT, 1)[1])
    if result["errors"]:
        raise RuntimeError(f"the immortals' workload failed: {result['errors']}")
    result["rest_kb"] = rest
    result["peak_kb"] = peak
    return result


# ---------------------------------------------------------------------------- baselines
def _fork_frame(i: int) -> bytes:
    import msgpack

    from ambrosia_core.wire import Rpc, RpcType
    from ambrosia_py.immortal import default_method_id

    args = msgpack.packb([i, bytes(PAYLOAD)], use_bin_type=True)
    return Rpc(default_method_id("take"), RpcType.FORK, args).encode()


def _loopback() -> tuple[socket.socket, socket.socket]:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from ceilings import tcp_pair

    return tcp_pair()


def raw_throughput(forks: int, burst: int) -> float:
    """Frames per second through a loopback socket, one ack per burst."""
    frame = _fork_frame(forks)
    a, b = _loopback()
    bursts = [min(burst, forks - s) for s in range(0, forks, burst)]

    def receive() -> None:
        for n in bursts:
            want = n * len(frame)
            while want:
                want -= len(b.recv(min(want, 1 << 20)))
            b.sendall(b"\x01")

    t = threading.Thread(target=receive)
    t.start()
    t0 = time.perf_counter()
    for n in bursts:
        a.sendall(frame * n)
        a.recv(1)
    elapsed = time.perf_counter() - t0
    t.join()
    a.close()
    b.close()
    return forks / elapsed


def raw_latencies(pings: int) -> list[int]:
    """Round trips of the echo call's sizes through a loopback socket (ns)."""
    from ambrosia_core.wire import Rpc, RpcType
    from ambrosia_py.immortal import default_method_id

    request = Rpc(default_method_id("echo"), RpcType.FORK, b"\x92\xcd\x04\xd2\x01" * 2).encode()
    reply = Rpc(-3, RpcType.FORK, b"\x93\x01\xc3\xcd\x04\xd2").encode()
    a, b = _loopback()

    def serve() -> None:
        for _ in range(pings + 20):
            want = len(request)
            while want:
                want -= len(b.recv(want))
            b.sendall(reply)

    t = threading.Thread(target=serve)
    t.start()
    out = []
    for i in range(pings + 20):
        t0 = time.perf_counter_ns()
        a.sendall(request)
        want = len(reply)
        while want:
            want -= len(a.recv(want))
        if i >= 20:
            out.append(time.perf_counter_ns() - t0)
    t.join()
    a.close()
    b.close()
    return out


def bare_python_rss_kb() -> int:
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE)
    try:
        time.sleep(0.3)
        return _rss_kb(p.pid, "VmRSS")
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(10)


# ---------------------------------------------------------------------------- figures
def percentile(values: list[int], q: float) -> float:
    s = sorted(values)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def bench_row(name: str, values: list[float], unit: str, baselines: list[float] | None,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    value = statistics.median(values)
    base = statistics.median(baselines) if baselines else None
    return {"name": name, "value": value, "unit": unit, "baseline": base,
            "ratio": value / base if base else None, "spread": _spread(values),
            "extra": extra or {}}


def run(quick: bool) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    import ceilings

    forks, burst, pings, repeats = (3000, 300, 300, 1) if quick else (20000, 500, 2000, 2)
    rates, p50s, p99s, rest_c, rest_b, peak_c, peak_b = [], [], [], [], [], [], []
    raw_rates, raw_p50s, raw_p99s, ceiling_rates = [], [], [], []
    ceiling_p50s, ceiling_p99s = [], []
    for _ in range(repeats):
        raw_rates.append(raw_throughput(forks, burst))
        ceiling_rates.append(ceilings.pipeline_rate(forks, burst, PAYLOAD))
        lat = ceilings.round_trips(pings)
        ceiling_p50s.append(percentile(lat, 0.5) / 1e3)
        ceiling_p99s.append(percentile(lat, 0.99) / 1e3)
        lat = raw_latencies(pings)
        raw_p50s.append(percentile(lat, 0.5) / 1e3)
        raw_p99s.append(percentile(lat, 0.99) / 1e3)
        r = run_immortals(forks, burst, pings)
        rates.append(r["forks"] / r["elapsed_s"])
        p50s.append(percentile(r["latencies_ns"], 0.5) / 1e3)
        p99s.append(percentile(r["latencies_ns"], 0.99) / 1e3)
        rest_c.append(r["rest_kb"]["coordinator"] / 1024)
        rest_b.append(r["rest_kb"]["binding"] / 1024)
        peak_c.append(r["peak_kb"]["coordinator"] / 1024)
        peak_b.append(r["peak_kb"]["binding"] / 1024)
    bare = [bare_python_rss_kb() / 1024]
    sizes = {"forks": forks, "burst": burst, "pings": pings, "repeats": repeats,
             "payload_bytes": PAYLOAD, "quick": quick}
    return [
        bench_row("durable fork RPCs between immortals (vs the plain-Python pipeline ceiling)",
             rates, "RPC/s", ceiling_rates, sizes),
        bench_row("durable fork RPCs between immortals (vs raw loopback)", rates, "RPC/s",
             raw_rates, sizes),
        bench_row("await round trip p50 (vs the plain-Python round trip with two log syncs)", p50s,
             "us", ceiling_p50s, sizes),
        bench_row("await round trip p99 (vs the plain-Python round trip with two log syncs)", p99s,
             "us", ceiling_p99s, sizes),
        bench_row("await round trip p50 (vs raw loopback)", p50s, "us", raw_p50s, sizes),
        bench_row("await round trip p99 (vs raw loopback)", p99s, "us", raw_p99s, sizes),
        bench_row("coordinator RSS at rest (vs bare python)", rest_c, "MiB", bare),
        bench_row("coordinator peak RSS under load (vs bare python)", peak_c, "MiB", bare, sizes),
        bench_row("binding RSS at rest (vs bare python)", rest_b, "MiB", bare),
        bench_row("binding peak RSS under load (vs bare python)", peak_b, "MiB", bare, sizes),
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    for row in run("--quick" in sys.argv):
        print(row)
