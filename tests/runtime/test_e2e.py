"""End to end over real sockets: `ambrosia run` processes against the ic-harness
coordinator, kill -9 at chosen points, and repro through `ambrosia debug-instance`."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ambrosia_core.ports import free_ports
from ambrosia_py import ReplayDivergenceError
from ambrosia_py.testing import checkpoints, repro
from samples.demo.services import Client, Server
from tests.launcher import ROOT, Launcher, wait_until

from .apps import Caller, Clocked, Configured, Nondeterministic, Pulsed, Stopping

pytestmark = pytest.mark.integration


def test_pending_awaits_complete_across_crashes(launcher: Launcher) -> None:
    from ambrosia_ic import registry

    rp, sp, icp = free_ports(3)  # the callee is registered but not running yet
    registry.register(instance_name="calc", receive_port=rp, send_port=sp, ic_port=icp,
                      log_dir=str(launcher.home / "logs"), home=launcher.home)
    caller = launcher.start("tests.runtime.apps:Caller", "caller", primary=False)
    caller.wait_for("caller: awaiting calc")
    caller.kill()  # crash 1: the call is in the log, its result is not
    caller = launcher.start("tests.runtime.apps:Caller", "caller")
    # Became primary while suspended: that checkpoint holds the quiescent snapshot + inputs.
    wait_until(lambda: max(checkpoints("caller", launcher.home), default=0) >= 2,
               "the caller's second checkpoint")
    caller.kill()  # crash 2
    caller = launcher.start("tests.runtime.apps:Caller", "caller")
    caller.wait_for("re-dispatching 1 inputs to rebuild suspended calls")
    calc = launcher.start("tests.runtime.apps:Calculator", "calc")
    done = caller.wait_for("caller: done")
    assert "3.5, 'ZeroDivisionError: division by zero', [42, 'HI'], 'RemoteCallError'" in done
    caller.stop()
    calc.stop()
    result = repro("caller", Caller, home=launcher.home)
    assert result.state.results == [3.5, "ZeroDivisionError: division by zero", [42, "HI"],
                                    "RemoteCallError"]


def test_impulses_from_outside_world_code_and_refused_during_recovery(
        launcher: Launcher) -> None:
    p = launcher.start("tests.runtime.apps:Pulsed", "pulsed")
    p.wait_for("(total 3)")
    p.kill()
    p = launcher.start("tests.runtime.apps:Pulsed", "pulsed")
    refused = p.wait_for("impulse refused during recovery")
    assert "before the instance is primary" in refused
    p.wait_for("(total 6)")
    p.stop()
    state = repro("pulsed", Pulsed, home=launcher.home).state
    assert state.pulses == [0, 1, 2, 3, 4, 5]


def test_side_effects_learn_why_the_instance_stops(launcher: Launcher) -> None:
    """SIGTERM to ``ambrosia run``: STOPPED, and the side effect's last Impulse is still
    logged (the coordinator stops after it). The coordinator killed -9: COORDINATOR_LOST,
    and an Impulse is refused."""
    p = launcher.start("tests.runtime.apps:Stopping", "stopping")
    p.wait_for("became primary")
    assert p.stop() == 0
    for line in ("on_stop STOPPED", "side effect cancelled: STOPPED",
                 "stop recorded: STOPPED"):
        assert any(line in x for x in p.lines), line
    p = launcher.start("tests.runtime.apps:Stopping", "stopping")
    started = p.wait_for("started the coordinator (pid")
    p.wait_for("became primary")
    os.kill(int(started.rsplit("pid ", 1)[1].rstrip(")")), signal.SIGKILL)
    assert p.proc.wait(30) != 0
    p.kill()  # joins the log reader
    for line in ("on_stop COORDINATOR_LOST", "side effect cancelled: COORDINATOR_LOST",
                 "impulse refused at the stop"):
        assert any(line in x for x in p.lines), line
    assert repro("stopping", Stopping, home=launcher.home).state.stops == ["STOPPED"]


@pytest.mark.slow
def test_kill_client_and_server_at_random_points_exactly_once(launcher: Launcher) -> None:
    n = 300
    env = dict(os.environ, DEMO_REQUESTS=str(n))
    rnd = random.Random()
    server = launcher.start("samples.demo.services:Server", "demo-server", env=env)
    client = launcher.start("samples.demo.services:Client", "demo-client", env=env)
    points = sorted(rnd.sample(range(50, n - 49, 50), 2))
    for i, at in enumerate(points):
        server.wait_for(f"server applied request {at}")
        if i == 0:
            server.kill()
            server = launcher.start("samples.demo.services:Server", "demo-server", env=env)
        else:
            client.kill()
            client = launcher.start("samples.demo.services:Client", "demo-client", env=env)
    assert "300 applied, 0 duplicates, order ok" in client.wait_for("client done", timeout=120)
    client.stop()
    server.stop()
    assert repro("demo-server", Server, home=launcher.home).state.applied == list(
        range(1, n + 1))
    client_state = repro("demo-client", Client, home=launcher.home).state
    assert client_state.acks == list(range(1, n + 1)) and client_state.summary == [n, 0, -1]


def test_repro_reproduces_state_and_outputs(launcher: Launcher) -> None:
    p = launcher.start("tests.runtime.apps:Clocked", "clocked")
    p.wait_for("sampled 3")
    p.stop()
    first = repro("clocked", Clocked, home=launcher.home)
    second = repro("clocked", Clocked, home=launcher.home)
    assert first.status == "ok" and first.records_replayed == 4
    assert len(first.state.samples) == 3
    assert first.state.samples == second.state.samples
    assert first.outputs == second.outputs and len(first.outputs) == 3


def test_a_nondeterministic_immortal_is_caught_by_repro(launcher: Launcher) -> None:
    p = launcher.start("tests.runtime.apps:Nondeterministic", "nondet")
    p.wait_for("tick 1")
    p.stop()
    assert checkpoints("nondet", launcher.home) == [1]  # one life: its first checkpoint
    with pytest.raises(ReplayDivergenceError) as info:
        repro("nondet", Nondeterministic, home=launcher.home)
    # Record 0 is the InitialMessage (its output, tick(3), replays the same); record 1's
    # tick(3) makes tick(2) with a fresh clock reading: the first output that differs.
    assert info.value.seq_id == 1
    assert "sequence id 1" in str(info.value)


def test_ambrosia_run_reports_bad_targets_in_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, AMBROSIA_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", "no.such.module:X",
                          "-i", "x"], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "ambrosia run: error: cannot import 'no.such.module': No module named 'no'"]
    out = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run",
                          "samples.demo.services:SERVER", "-i", "x"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 1 and "is not an ambrosia_py.Immortal subclass" in out.stderr
    # A module that fails as it is imported: one line naming it and why, no traceback.
    (tmp_path / "broken_module.py").write_text("def f(:\n")
    out = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", "broken_module:X",
                          "-i", "x"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=60)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr.strip().splitlines() == [
        "ambrosia run: error: cannot import 'broken_module': SyntaxError: invalid syntax "
        "(broken_module.py, line 1) (`python -c 'import broken_module'` shows the traceback)"]


def test_a_repro_without_the_recorded_configuration_names_it_once(
        launcher: Launcher, caplog: pytest.LogCaptureFixture) -> None:
    """It used to say the divergence's sentence twice ("replay diverged ... at sequence
    id 0: replay diverged ... at sequence id 0") with a warning for each recorded result
    the replay had no call for."""
    p = launcher.start("tests.runtime.apps:Configured", "configured",
                       args=["--set", "ask_self=true"])
    p.wait_for("configured: done")
    p.stop()
    with caplog.at_level(logging.WARNING), pytest.raises(ReplayDivergenceError) as info:
        repro("configured", Configured, home=launcher.home)
    said = str(info.value)
    assert said.count("replay diverged") == 1, said
    assert said.startswith("replay diverged from the recorded run at sequence id 0: "), said
    assert said.endswith("; the replay read ctx.config and was given none: pass the recorded "
                         "run's configuration (--config, --set) as repro(..., config=...)"), said
    stray = [r for r in caplog.records if "which is not pending" in r.getMessage()]
    assert 1 <= len(stray) <= 2, [r.getMessage() for r in stray]  # the 1st, the 10th
    result = repro("configured", Configured, home=launcher.home, config={"ask_self": True})
    assert result.status == "ok" and result.state.doubled == [2 * i for i in range(30)]
