"""Every sub-command honours the top-level ``--home``, whatever $AMBROSIA_HOME and $HOME say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import ROOT

pytestmark = pytest.mark.integration


def _env(tmp: Path) -> dict[str, str]:
    """$AMBROSIA_HOME and $HOME both point away from the directory --home names."""
    env = dict(os.environ, AMBROSIA_HOME=str(tmp / "env-home"), HOME=str(tmp / "user"),
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _ready_line(env: dict[str, str], *args: str) -> str:
    """Start a long-running sub-command, return its readiness line, stop it."""
    proc = subprocess.Popen([sys.executable, "-m", "ambrosia_cli", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        return proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.communicate()


def test_every_sub_command_uses_the_top_level_home(tmp_path: Path) -> None:
    env = _env(tmp_path)
    home = tmp_path / "chosen"
    logs = tmp_path / "logs"

    # run: registers on first use and keeps its logs under --home.
    run = ImmortalProcess.start(
        [sys.executable, "-m", "ambrosia_cli", "--home", str(home), "run",
         "samples.counter.counter:Counter", "-i", "counter"],
        env=env, cwd=ROOT, keep_stdout=False)
    try:
        run.wait_for("count is 1")
    finally:
        run.stop()
    reg = json.loads((home / "instances" / "counter.json").read_text())
    assert reg["log_dir"] == "logs"  # relative to the home: it moves with it
    assert (home / "logs" / "counter_0" / "serverchkpt1").is_file()

    # register-instance and add-replica write there too.
    # Ports no registration in this home holds (the counter's stopped ports are free yet
    # still its own, and register-instance refuses them).
    rp, sp, ip, rp1, sp1, ip1 = registry.unregistered_free_ports(6, home)
    r = _cli(env, "--home", str(home), "register-instance", "-i", "pair", "-rp", str(rp),
             "-sp", str(sp), "-p", str(ip), "-l", str(logs), "--active-active")
    assert r.returncode == 0, r.stderr
    assert json.loads((home / "instances" / "pair.json").read_text())["receive_port"] == rp
    r = _cli(env, "--home", str(home), "add-replica", "-i", "pair", "-r", "1", "-rp", str(rp1),
             "-sp", str(sp1), "-p", str(ip1))
    assert r.returncode == 0, r.stderr
    assert json.loads((home / "replicas" / "pair" / "1.json").read_text())["ic_port"] == ip1

    # ic and debug-instance find the registrations there (else: "not registered").
    reg = json.loads((home / "instances" / "counter.json").read_text())
    assert _ready_line(env, "--home", str(home), "ic", "-i", "counter") == (
        f"ambrosia-ic ready: instance=counter receive={reg['receive_port']} "
        f"send={reg['send_port']} ic={reg['ic_port']}")
    drp, dsp = free_ports(2)
    assert _ready_line(env, "--home", str(home), "debug-instance", "-i", "counter", "-c", "1",
                       "-rp", str(drp), "-sp", str(dsp)) == (
        f"ambrosia-ic ready: instance=counter receive={drp} send={dsp} mode=debug")

    # log dump reads the instance registered there.
    r = _cli(env, "--home", str(home), "log", "dump", "-i", "counter")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"instance counter: {home / 'logs' / 'counter_0'}"

    # Nothing went to $AMBROSIA_HOME or ~/.ambrosia.
    assert not (tmp_path / "env-home").exists()
    assert not (tmp_path / "user").exists()
    assert sorted(p.name for p in home.iterdir()) == [
        "classes", "instances", "link-secret", "logs", "replicas"]


def test_run_home_overrides_the_top_level_home(tmp_path: Path) -> None:
    env = _env(tmp_path)
    run = ImmortalProcess.start(
        [sys.executable, "-m", "ambrosia_cli", "--home", str(tmp_path / "outer"), "run",
         "samples.counter.counter:Counter", "-i", "counter", "--home", str(tmp_path / "inner")],
        env=env, cwd=ROOT, keep_stdout=False)
    try:
        run.wait_for("count is 1")
    finally:
        run.stop()
    assert (tmp_path / "inner" / "instances" / "counter.json").is_file()
    assert not (tmp_path / "outer").exists()
    assert not (tmp_path / "env-home").exists()
