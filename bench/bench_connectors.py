"""The connector coordinator end to end: lines per second from a file feed through the
coordinator to a committed 2PC file sink, and ACK latency, against a plain durable
loopback pipe in the same run.

The pipeline: ``ambrosia-sink`` (a process), the coordinator (``ambrosia run
connectors``: its binding and coordinator processes; every
``receive`` Impulse is logged and fsynced before it is applied and ACKed) and, in this
process, the client library's ``Feed`` sending one file of LINES lines of 64 bytes (one
MESSAGE each) with ``--once`` semantics. A repetition is timed from the feed's start to the
moment the sink's ``committed`` file holds every byte of the file (so it counts the 2PC
rounds and the sink's fsyncs too); each repetition is a new stream through the same
processes. ACK latency: for each MESSAGE, the time from the feed writing it to the feed
reading the ACK that covers it.

The baseline, run just before each repetition: the same bytes (the file's lines) sent over
a plain loopback TCP socket to a receiver process that writes each chunk it reads to a file,
fsyncs it and answers with the byte count so far. The sender keeps at most CREDITS lines
unanswered (the window the feed gets from the coordinator's credits), so both carry the
same load; rate = lines / time until the count covers everything, latency = from a
chunk's write to the answer covering it (per line).
Ratio = pipeline / baseline: the share of a bare durable pipe's rate the exactly-once
pipeline keeps (rates), or how many times longer it takes (latencies).
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ambrosia_services.connectors.clients import Address, Feed, FeedRecord, FileSource  # noqa: E402

from ambrosia_core.ports import free_ports  # noqa: E402
from ambrosia_core.processes import stop_process  # noqa: E402
from ambrosia_py.testing import ImmortalProcess, start_immortal  # noqa: E402

LINE = 64  # bytes per line, newline included
CREDITS = 1000  # the coordinator's default credits: MESSAGEs a feed sends ahead of ACKs
CHUNK = 256 * LINE  # what the baseline writes at a time (the feed's batch per stream)


def _lines(tag: str, n: int) -> bytes:
    return b"".join(f"{tag} {i:09d} ".encode().ljust(LINE - 1, b"x") + b"\n"
                    for i in range(n))


# ---------------------------------------------------------------------------- the pipeline
class _TimedSource:
    """A ``FileSource`` that notes when each record is handed to the feed (which writes it
    at once) and, on each ACK, how long ago the records it covers were written."""

    def __init__(self, path: Path) -> None:
        self._inner = FileSource(path, name=path.name, follow=False)
        self.name, self.stream_id = self._inner.name, self._inner.stream_id
        self._sent: deque[tuple[int, float]] = deque()
        self.latencies: list[float] = []

    @property
    def finished(self) -> bool:
        return self._inner.finished

    @property
    def last_id(self) -> int | None:
        return self._inner.last_id

    def resume(self, por: int | None) -> None:
        self._inner.resume(por)

    def next_record(self) -> FeedRecord | None:
        record = self._inner.next_record()
        if record is not None:
            self._sent.append((record.message_id, time.perf_counter()))
        return record

    def acked(self, por: int) -> None:
        now = time.perf_counter()
        while self._sent and self._sent[0][0] <= por:
            self.latencies.append(now - self._sent.popleft()[1])


class _Pipeline:
    """The sink and the coordinator, started once for every repetition."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port, self.sink_port = free_ports(2)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        self.committed = work / "out" / "committed"
        log = (work / "sink.log").open("wb")
        self.sink = subprocess.Popen(
            [sys.executable, "-m", "ambrosia_services.connectors.clients.filesink", "--listen",
             f"127.0.0.1:{self.sink_port}", "--dir", str(work / "out")],
            stdout=log, stderr=log, cwd=ROOT, env=env)
        log.close()
        cfg = work / "coord.toml"
        cfg.write_text(f'listen = "127.0.0.1:{self.port}"\ninterval_seconds = 0.02\n'
                       f'[sinks]\nout = "127.0.0.1:{self.sink_port}"\n')
        self.coord: ImmortalProcess = start_immortal(
            "ambrosia_services.connectors:ConnectorCoordinator", "bench-connectors",
            home=work / "home", cwd=ROOT, env=env, args=["--config", str(cfg)])
        self.coord.wait_for("listening for sources")
        self.coord.wait_for("linked at offset")

    def close(self) -> None:
        self.coord.stop()
        stop_process(self.sink, 10, group=False)

    def size(self) -> int:
        return self.committed.stat().st_size if self.committed.exists() else 0

    def send(self, path: Path) -> tuple[float, list[float]]:
        """One file through the pipeline: (seconds until committed, ACK latencies)."""
        goal = self.size() + path.stat().st_size
        source = _TimedSource(path)
        feed = Feed([source], [Address("127.0.0.1", self.port)], backoff_cap=0.5)

        async def go() -> float:
            started = time.perf_counter()
            await asyncio.wait_for(feed.run(), 300)
            while self.size() < goal:
                await asyncio.sleep(0.001)
            return time.perf_counter() - started

        elapsed = asyncio.run(go())
        if self.size() != goal:
            raise RuntimeError(f"the sink committed {self.size()} bytes, expected {goal}")
        return elapsed, source.latencies


# ---------------------------------------------------------------------------- the baseline
def _receive(out: str) -> None:
    """The baseline receiver (``python bench_connectors.py --receive FILE``): one
    connection at a time; write + fsync each chunk, answer with the byte count so far."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        print(server.getsockname()[1], flush=True)
        while True:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio does
            total = 0
            with conn, open(out, "wb") as f:
                while data := conn.recv(CHUNK):
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                    total += len(data)
                    conn.sendall(total.to_bytes(8, "big"))


def _baseline(port: int, data: bytes) -> tuple[float, list[float]]:
    """The same bytes through the durable pipe: (seconds until all fsynced, latencies)."""

    async def go() -> tuple[float, list[float]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sent: deque[tuple[int, int, float]] = deque()  # a chunk's end, lines, when written
        latencies: list[float] = []
        started = time.perf_counter()

        covered = 0
        moved = asyncio.Event()

        async def write() -> None:
            for off in range(0, len(data), CHUNK):
                chunk = data[off:off + CHUNK]
                while off + len(chunk) - covered > CREDITS * LINE:
                    moved.clear()
                    await moved.wait()
                sent.append((off + len(chunk), len(chunk) // LINE, time.perf_counter()))
                writer.write(chunk)
                await writer.drain()

        writing = asyncio.ensure_future(write())
        while covered < len(data):
            covered = int.from_bytes(await reader.readexactly(8), "big")
            moved.set()
            now = time.perf_counter()
            while sent and sent[0][0] <= covered:
                _end, n, at = sent.popleft()
                latencies.extend([now - at] * n)
        elapsed = time.perf_counter() - started
        await writing
        writer.close()
        return elapsed, latencies

    return asyncio.run(go())


# ---------------------------------------------------------------------------- figures
def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def _row(name: str, values: list[float], unit: str, baselines: list[float],
         extra: dict[str, Any]) -> dict[str, Any]:
    value, base = statistics.median(values), statistics.median(baselines)
    return {"name": name, "value": value, "unit": unit, "baseline": base,
            "ratio": value / base if base else None, "spread": _spread(values),
            "extra": extra}


def run(quick: bool) -> list[dict[str, Any]]:
    lines, repeats = (20_000, 3) if quick else (200_000, 5)
    rates, p50s, p99s, raw_rates, raw_p50s, raw_p99s = [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-connectors-") as tmp:
        work = Path(tmp)
        receiver = subprocess.Popen([sys.executable, __file__, "--receive",
                                     str(work / "raw")], stdout=subprocess.PIPE, text=True)
        pipe = None
        try:
            assert receiver.stdout is not None
            raw_port = int(receiver.stdout.readline())
            pipe = _Pipeline(work)
            for rep in range(repeats):
                path = work / f"stream-{rep}.log"
                data = _lines(f"s{rep}", lines)
                path.write_bytes(data)
                elapsed, lat = _baseline(raw_port, data)
                raw_rates.append(lines / elapsed)
                raw_p50s.append(_pct(lat, 0.5) * 1e3)
                raw_p99s.append(_pct(lat, 0.99) * 1e3)
                elapsed, lat = pipe.send(path)
                rates.append(lines / elapsed)
                p50s.append(_pct(lat, 0.5) * 1e3)
                p99s.append(_pct(lat, 0.99) * 1e3)
        finally:
            if pipe is not None:
                pipe.close()
            receiver.kill()
            receiver.wait()
    extra = {"lines": lines, "line_bytes": LINE, "repeats": repeats, "quick": quick}
    return [
        _row("feed -> coordinator -> committed sink (vs raw loopback + fsync)", rates,
             "lines/s", raw_rates, extra),
        _row("ACK latency p50 (vs raw loopback + fsync ack)", p50s, "ms", raw_p50s, extra),
        _row("ACK latency p99 (vs raw loopback + fsync ack)", p99s, "ms", raw_p99s, extra),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--receive":
        _receive(sys.argv[2])
    else:
        for row in run("--quick" in sys.argv):
            print(row)
