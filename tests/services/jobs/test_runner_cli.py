"""The job runner and the Spark Connect server as commands, with no Spark running: without
Spark's client (the ``spark`` extra; its import blocked here) each says so in one line and
exits 1; a runner stopped by SIGTERM or SIGINT while an initiator is linked says one line
and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ambrosia_services.jobs import InitiatorJobs
from ambrosia_services.jobs.attempts import member_id
from ambrosia_services.jobs.link import Held, JobLinks, RunnerAddress

from ambrosia_core.processes import kill_process

ROOT = Path(__file__).resolve().parents[3]
JOBS = "tests.services.jobs.spark.jobs_for_tests"
EXTRA = "pip install 'ambrosia-py[spark]'"


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(ROOT / "ic-harness"), str(ROOT / "services"),
         os.environ.get("PYTHONPATH", "")]))
    for name in ("AMBROSIA_TLS_CERT", "AMBROSIA_TLS_KEY", "AMBROSIA_TLS_CA"):
        env.pop(name, None)
    return env


def _runner_args(tmp_path: Path) -> list[str]:
    return ["--listen", "127.0.0.1:0", "--connect", "sc://127.0.0.1:1", "--jobs", JOBS,
            "--instance-name", "r1", "--dir", str(tmp_path / "out")]


def _without(module: str, blocked: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` with ``blocked`` unimportable (None in sys.modules), as
    when the extra that brings it is not installed."""
    code = (f"import runpy, sys; sys.modules[{blocked!r}] = None; "
            f"sys.argv = [{module!r}, *sys.argv[1:]]; "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, env=_env(), cwd=ROOT, timeout=120)


@pytest.mark.parametrize(("blocked", "named"),
                         [("pyspark", "pyspark"), ("pandas", "Pandas >= 2.2.0")])
def test_a_runner_without_sparks_client_names_the_extra(tmp_path: Path, blocked: str,
                                                       named: str) -> None:
    """It used to end in a traceback (ModuleNotFoundError, or pyspark's own
    PySparkImportError for a dependency of its Connect client)."""
    done = _without("ambrosia_services.jobs.runner", blocked, _runner_args(tmp_path))
    assert done.returncode == 1, done.stderr
    assert done.stderr == ("python -m ambrosia_services.jobs.runner: error: the job runner "
                           f"needs {named}, part of Spark's client: {EXTRA}\n")
    assert done.stdout == ""  # it never listened


def test_the_connect_server_without_pyspark_names_the_extra(tmp_path: Path) -> None:
    """It used to warn about the staged-records jar, then say "spark-submit not found"."""
    done = _without("ambrosia_services.jobs.spark.server", "pyspark",
                    ["--listen", ":1", "--log-dir", str(tmp_path)])
    assert done.returncode == 1, done.stderr
    assert done.stderr == ("error: the Spark Connect server needs pyspark, part of Spark's "
                           f"client (its spark-submit and jars): {EXTRA}\n")
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_an_ordinary_stop_is_one_line_and_exit_0(tmp_path: Path,
                                                 signum: signal.Signals) -> None:
    """A linked initiator's handler used to be cancelled at the loop's end, and Python
    3.11 logged the CancelledError with its traceback."""
    err = tmp_path / "runner.err"
    with open(err, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ambrosia_services.jobs.runner", *_runner_args(tmp_path)],
            stdout=subprocess.PIPE, stderr=out, text=True, env=_env(), cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(line.split(" listening on ")[1].split(";")[0].rsplit(":", 1)[1])

        async def linked_then_stopped() -> int:
            links = JobLinks(InitiatorJobs(uuid.UUID(int=7)),
                             [RunnerAddress(member_id("r1"), "127.0.0.1", port)],
                             max_backoff=0.05)
            async with links, asyncio.timeout(60):
                while not isinstance(await links.next_event(), Held):
                    pass
                proc.send_signal(signum)
                return await asyncio.to_thread(proc.wait, 60)

        assert asyncio.run(linked_then_stopped()) == 0, err.read_text()
    finally:
        kill_process(proc, group=False)
    said = err.read_text()
    assert "Traceback" not in said and "CancelledError" not in said, said
    lines = said.strip().splitlines()
    connected = next(i for i, ln in enumerate(lines) if "initiator 0000" in ln)
    assert len(lines) == connected + 2, said  # after the link, the stop's line only
    assert lines[-1].endswith(f"ambrosia_services.jobs.runner INFO stopping ({signum.name})")
