"""Job launch overhead on a warm runner against ``spark-submit`` of the same job, and the
coordinator binding's memory with and without runners.

- Warm runner: one local[2] Spark Connect server and one job runner are started first and
  warmed by two jobs; then each repetition is one micro-batch word count (2,000 lines) as
  the coordinator runs it: a protocol ``start`` over TCP, the runner's Connect session,
  the staged write and the commit by rename, and the result streamed back, timed from
  the ``start`` to the job's last batch. Baseline: ``spark-submit --master local[2]`` of
  a script running the same count over the same lines (a new JVM each time), timed to
  its exit. Ratio = baseline / warm (how many times faster a warm runner is).
- Memory: the RSS of ``ambrosia run spark``'s binding
  process once primary, with a runner configured (the job links running) and without.
  Ratio = with / without.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ambrosia_services.jobs import InitiatorJobs, JobCancelled, JobDone  # noqa: E402
from ambrosia_services.jobs.attempts import Attempt, member_id, plan_params  # noqa: E402
from ambrosia_services.jobs.link import JobLinks, RunnerAddress  # noqa: E402
from ambrosia_services.jobs.spark import ConnectServer  # noqa: E402
from ambrosia_services.jobs.spark.server import spark_env, spark_tool  # noqa: E402

from ambrosia_py.testing import start_immortal  # noqa: E402

LINES = [f"the quick Brown fox {i % 97} jumps over the lazy dog{i % 13}" for i in range(2000)]

SUBMIT_SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    sys.path.insert(0, sys.argv[3])
    from ambrosia_services.pipeline.jobs import wordcount
    spark = SparkSession.builder.getOrCreate()
    lines = json.load(open(sys.argv[1]))
    wordcount(spark, {"lines": lines}).write.mode("error").json(sys.argv[2])
    spark.stop()
""")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_runner(connect: str, out: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    env = spark_env()
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ambrosia_services.jobs.runner", "--listen", "127.0.0.1:0",
         "--connect", connect, "--jobs", "ambrosia_services.pipeline.jobs",
         "--instance-name", "bench", "--dir", str(out)],
        stdout=subprocess.PIPE, stderr=open(log, "wb"), cwd=ROOT, env=env)  # noqa: SIM115
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    return proc, int(line.split("listening on 127.0.0.1:")[1].split(";")[0])


async def _warm_jobs(port: int, n: int, warmup: int) -> list[float]:
    runner = member_id("bench")
    links = JobLinks(InitiatorJobs(member_id("bench-coordinator")),
                     [RunnerAddress(runner, "127.0.0.1", port)])
    times = []
    async with links:
        for i in range(warmup + n):
            t0 = time.perf_counter()
            job = links.start("wordcount", plan_params(Attempt(f"bench-{i}", 1),
                                                       {"lines": LINES}), [runner])
            while True:
                event = await links.next_event()
                if isinstance(event, JobCancelled) and event.cancel.job_id == job:
                    raise RuntimeError(f"bench job failed: {event.cancel.message}")
                if isinstance(event, JobDone) and event.job_id == job:
                    break
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def _spark_submit(tmp: Path, n: int) -> list[float]:
    script = tmp / "wordcount_submit.py"
    script.write_text(SUBMIT_SCRIPT)
    data = tmp / "lines.json"
    import json

    data.write_text(json.dumps(LINES))
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        subprocess.run([spark_tool("spark-submit"), "--master", "local[2]", str(script),
                        str(data), str(tmp / f"submit-{i}"), str(ROOT)],
                       env=spark_env(), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return times


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _binding_rss(tmp: Path, name: str, runner_port: int | None) -> float:
    cfg = tmp / f"{name}.toml"
    text = f'listen = "127.0.0.1:{_free_port()}"\n'
    if runner_port is not None:
        text += f'runners = ["bench@127.0.0.1:{runner_port}"]\nout = "{tmp / "out"}"\n'
    cfg.write_text(text)
    home = tmp / f"home-{name}"
    home.mkdir()
    p = start_immortal("ambrosia_services.pipeline:SparkCoordinator", name, home=home, cwd=ROOT,
                       args=["--config", str(cfg)])
    try:
        p.wait_for("listening for sources")
        time.sleep(1.0)  # let the links connect
        return _rss_mb(p.proc.pid)
    finally:
        p.stop()


def _spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs)


def run(quick: bool) -> list[dict[str, Any]]:
    n_warm, n_submit = (5, 2) if quick else (15, 4)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = ConnectServer(_free_port(), master="local[2]", log_dir=tmp)
        server.start()
        runner = None
        try:
            runner, port = _start_runner(server.url, tmp / "out", tmp / "runner.log")
            warm = asyncio.run(_warm_jobs(port, n_warm, 2))
            submit = _spark_submit(tmp, n_submit)
            rss_with = _binding_rss(tmp, "with", port)
            rss_without = _binding_rss(tmp, "without", None)
        finally:
            if runner is not None:
                runner.kill()
                runner.wait()
            server.stop()
    m_warm, m_submit = statistics.median(warm), statistics.median(submit)
    return [
        {"name": "baseline: spark-submit --master local[2] of the word count (2,000 lines)",
         "value": m_submit, "unit": "s", "baseline": None, "ratio": None,
         "spread": _spread(submit), "extra": {"samples": submit}},
        {"name": "job on a warm runner through Connect: start -> committed -> result",
         "value": m_warm, "unit": "s", "baseline": m_submit, "ratio": m_submit / m_warm,
         "spread": _spread(warm), "extra": {"samples": warm}},
        {"name": "baseline: coordinator binding RSS, no runners",
         "value": rss_without, "unit": "MB", "baseline": None, "ratio": None,
         "spread": 0.0},
        {"name": "coordinator binding RSS with a runner linked",
         "value": rss_with, "unit": "MB", "baseline": rss_without,
         "ratio": rss_with / rss_without, "spread": 0.0},
    ]


if __name__ == "__main__":  # pragma: no cover
    for row in run("--quick" in sys.argv):
        print(row)
