"""The package as `pip install .` leaves it, with no extras, in a fresh virtual
environment: an immortal and its coordinator must start and stop there. Optional extras
(pyzmq for raft://, pyspark, matplotlib) stay optional; a coordinator that imported one of
them unconditionally failed here on every start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ambrosia_core.processes import Child

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]


def test_a_plain_install_with_no_extras_runs_an_immortal(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # Without a pip of its own (ensurepip costs 4 s of CPU): this suite's pip installs
    # into it (`--python`), resolving and building exactly as the venv's own would.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # The compiled fast paths are built from their sources as on any install, unoptimized:
    # gcc -O3 -g spent 9 s of CPU on them, -O0 2 s; what they compute is the same, and
    # AMBROSIA_PY_CODEC=compiled (make test) makes the run below load them or fail.
    build_env = dict(env, CFLAGS=f"{env.get('CFLAGS', '')} -O0 -g0".strip())
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install",
                                "-q", str(ROOT)], env=build_env,
                               capture_output=True, text=True, timeout=800)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    for extra in ("zmq", "pyspark", "matplotlib"):  # none of the extras came along
        probe = subprocess.run([str(py), "-c", f"import {extra}"], env=env,
                               capture_output=True, timeout=60)
        assert probe.returncode != 0, f"{extra} is installed without its extra"
    # The staged-records Spark source is built from its sources on the machine that
    # runs Spark (services/ambrosia_services/jobs/spark/jar.py): the package ships them.
    shipped = subprocess.run(
        [str(py), "-c", "import importlib.util, pathlib; "
         "spec = importlib.util.find_spec('ambrosia_services.jobs.spark'); "
         "root = pathlib.Path(spec.submodule_search_locations[0]) / 'java'; "
         "print(*sorted(p.relative_to(root).as_posix() for p in root.rglob('*') "
         "if p.is_file()))"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    java = ROOT / "services" / "ambrosia_services" / "jobs" / "spark" / "java"
    want = sorted(p.relative_to(java).as_posix() for p in java.rglob("*") if p.is_file())
    assert shipped.stdout.split() == want, shipped.stdout + shipped.stderr
    # The live status page (`ambrosia status --listen`) serves its files from the package.
    page = subprocess.run(
        [str(py), "-c", "import importlib.resources as r; "
         "print(*sorted(f.name for f in r.files('ambrosia_cli').joinpath('page').iterdir()))"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert page.stdout.split() == ["index.html", "page.css", "page.js"], page.stdout + page.stderr
    # An immortal of the user's own, outside the repository (nothing imported from it).
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "samples" / "counter" / "counter.py", app / "counter_app.py")
    run_env = dict(env, AMBROSIA_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    run = Child.start([str(venv / "bin" / "ambrosia"), "run", "counter_app:Counter", "-i",
                       "counter"], name="ambrosia run", env=run_env, cwd=app, keep_stdout=False)
    try:
        # Its first start, then the increment it forked to itself, applied.
        run.wait_for("count is 1", timeout=120)
        assert all(str(ROOT) not in ln for ln in run.lines)
        code = run.stop(timeout=30)
    finally:
        run.kill()
    lines = run.lines
    assert code == 0, "\n".join(lines[-20:])
    assert lines[-1] == "ambrosia run: counter stopped (SIGTERM)"
