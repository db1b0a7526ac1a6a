"""A home directory copied or moved whole keeps its instances' histories, and an instance
that has started never starts afresh on an empty or missing log directory: it refuses in
one line naming the directory, unless told to start afresh."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from ambrosia_ic import registry

from ambrosia_py.testing import start_immortal
from tests.launcher import ROOT

COUNTER = "samples.counter.counter:Counter"


def run_once(home: Path, *args: str, until: str = "count is 1") -> list[str]:
    """One start of the counter until it logs ``until`` (by default: its first increment
    applied, logged after its first start), then an ordinary stop; its lines."""
    p = start_immortal(COUNTER, "counter", home=home, cwd=ROOT, args=list(args))
    try:
        p.wait_for(until)
    finally:
        assert p.stop() == 0, p.lines[-5:]
    return p.lines


def test_a_copied_home_recovers_its_own_logs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_once(home)
    stored = json.loads((home / "instances" / "counter.json").read_text())
    assert stored["log_dir"] == "logs"  # relative to the home it lives in
    copy = tmp_path / "copy"
    shutil.copytree(home, copy, symlinks=True)
    shutil.rmtree(home)  # moved, not copied: nothing of the old place is left
    lines = run_once(copy, until="on becoming primary")
    assert any("count is 1 on becoming primary" in ln for ln in lines), lines  # recovered
    assert any("recovery complete: 2 messages replayed" in ln for ln in lines), lines
    assert registry.load("counter", copy).log_dir == str(copy.resolve() / "logs")


def test_an_instance_that_started_refuses_an_empty_log_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_once(home)
    # As a registration written before logs were kept relative to the home: an absolute
    # directory, then the home moved and the old place gone.
    path = home / "instances" / "counter.json"
    stored = json.loads(path.read_text())
    del stored["check"]  # written before registrations carried check bytes
    stored["log_dir"] = str(tmp_path / "old-home" / "logs")
    path.write_text(json.dumps(stored))
    env_home = {"AMBROSIA_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", COUNTER, "-i",
                           "counter"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**_env(), **env_home})
    assert done.returncode == 1
    # Refused by `ambrosia run` before anything is written, naming what to run.
    assert done.stderr.splitlines() == [
        "ambrosia run: error: counter has started before, but its log directory "
        f"{tmp_path / 'old-home' / 'logs' / 'counter_0'} holds no log to recover from "
        "(moved, removed or emptied?); register it again with the directory that holds its "
        "log (ambrosia register-instance -i counter -l DIR), or start it afresh on purpose "
        f"with ambrosia run {COUNTER} -i counter --start-afresh"]
    assert not (tmp_path / "old-home").exists()
    # Told to, it starts afresh there.
    lines = run_once(home, "--start-afresh")
    assert any("--start-afresh: counter starts afresh" in ln for ln in lines), lines
    assert any("count is 0 on becoming primary" in ln for ln in lines), lines


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "AMBROSIA_HOME"}
