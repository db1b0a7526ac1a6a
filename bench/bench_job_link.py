"""A job link's result stream over loopback TCP: how fast a runner's committed rows reach
the initiator for a stream's starting credit and a batch size, the receiver granting each
batch back as it takes it (as ``JobLinks`` does). No Spark: the rows are in memory, so
this is the link's ceiling, what the hello's defaults (1 MiB of credit, 64 KiB batches,
``jobs.connection``) were chosen from.

Standalone: ``python bench/bench_job_link.py`` prints the table.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for where in (ROOT, ROOT / "services"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from ambrosia_services.jobs import (  # noqa: E402
    RESULT_EDGE,
    Batch,
    FlowControl,
    JobConnection,
    JobId,
    Role,
)

JOB = JobId(uuid.UUID(int=1), 0)
# (credit, batch): a small window, the defaults, a large one.
CASES = [(4 << 10, 1 << 10), (64 << 10, 16 << 10), (1 << 20, 64 << 10), (4 << 20, 1 << 20)]


async def _stream(credits: int, batch: int, total: int) -> float:
    """Seconds to stream ``total`` bytes of rows in ``batch``-byte batches."""
    done = asyncio.Event()

    async def initiator(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = JobConnection(Role.INITIATOR, Role.PARTICIPANT, initial_credits=credits)
        got = 0
        while got < total and (data := await r.read(1 << 16)):
            conn.receive_data(data)
            for msg in conn.events():
                assert isinstance(msg, Batch)
                got += len(msg.rows)
                if not msg.last:
                    w.write(conn.send(FlowControl(JOB, RESULT_EDGE, len(msg.rows))))
        done.set()

    server = await asyncio.start_server(initiator, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = JobConnection(Role.PARTICIPANT, Role.INITIATOR, initial_credits=credits)
    credit = asyncio.Event()

    async def grants() -> None:
        while data := await reader.read(1 << 16):
            conn.receive_data(data)
            for _ in conn.events():
                credit.set()

    granting = asyncio.ensure_future(grants())
    rows, n = bytes(batch), total // batch
    start = time.perf_counter()
    for number in range(n):
        while conn.send_credit(JOB, RESULT_EDGE) < batch:
            credit.clear()
            await credit.wait()
        writer.write(conn.send(Batch(JOB, RESULT_EDGE, number, rows, number == n - 1)))
        await writer.drain()
    await done.wait()
    took = time.perf_counter() - start
    granting.cancel()
    writer.close()
    server.close()
    return took


def run(quick: bool) -> list[dict[str, Any]]:
    total, repeats = (16 << 20, 3) if quick else (64 << 20, 5)
    out = []
    for credits, batch in CASES:
        rates = [total / asyncio.run(_stream(credits, batch, total)) / 1e6
                 for _ in range(repeats)]
        median = statistics.median(rates)
        out.append({"name": f"job link results, {credits >> 10} KiB credit, "
                            f"{batch >> 10} KiB batches",
                    "value": round(median, 1), "unit": "MB/s", "baseline": None,
                    "ratio": None, "spread": round((max(rates) - min(rates)) / median, 2)})
    return out


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(f"{row['name']:<50} {row['value']:>8} {row['unit']} (spread {row['spread']})")
