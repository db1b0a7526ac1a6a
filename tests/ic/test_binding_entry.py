"""The binding's own entry point, ``python -m ambrosia_py.runtime``: an immortal run beside a
coordinator someone else started, given only its two ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ambrosia_core.errors import AmbrosiaError, UsageError
from ambrosia_py.runtime.cli import load_class
from ambrosia_py.testing import ImmortalProcess
from tests.launcher import ROOT

from .conftest import Harness

pytestmark = pytest.mark.integration

COUNTER = "samples.counter.counter:Counter"
PROG = "python -m ambrosia_py.runtime"


def _env(harness: Harness) -> dict[str, str]:
    return dict(harness.env, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        q for q in (str(ROOT), os.environ.get("PYTHONPATH", "")) if q))


def test_the_binding_runs_on_the_ports_of_a_running_coordinator(harness: Harness) -> None:
    reg = harness.register("counter")
    harness.start("counter")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ambrosia_py.runtime", COUNTER, "-i", "counter",
         "--receive-port", str(reg.receive_port), "--send-port", str(reg.send_port)],
        env=_env(harness), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    p = ImmortalProcess(proc, group=False)  # in the tests' process group
    try:
        p.wait_for("became primary")
        p.wait_for("count is 1")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        p.stop()
    finally:
        p.kill()
    assert p.lines[-1] == f"{PROG}: counter stopped (SIGTERM)"
    # It started no coordinator of its own: the one the harness started is still there.
    assert [ln for ln in p.lines if "started the coordinator" in ln] == []


def test_the_binding_entry_needs_both_ports(harness: Harness) -> None:
    # The same line for a script that still spells them --ic-receive-port/--ic-send-port:
    # it names the spellings to use.
    for old in ([], ["--ic-receive-port", "1", "--ic-send-port", "2"]):
        r = subprocess.run([sys.executable, "-m", "ambrosia_py.runtime", COUNTER, "-i", "x",
                            *old], env=_env(harness), cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (
            2, "", f"{PROG}: error: the following arguments are required: "
                   "-rp/--receive-port/--receivePort, -sp/--send-port/--sendPort\n")


def test_the_binding_entry_names_a_class_that_is_no_immortal(harness: Harness) -> None:
    # The base class itself (imported there) is no immortal class either.
    r = subprocess.run([sys.executable, "-m", "ambrosia_py.runtime",
                        "samples.counter.counter:Immortal",
                        "-i", "x", "--receive-port", "1", "--send-port", "2"],
                       env=_env(harness), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr.splitlines()[-1]) == (
        1, "", f"{PROG}: error: samples.counter.counter:Immortal is not an ambrosia_py.Immortal "
               "subclass")


def test_a_target_that_cannot_be_used_is_the_one_hierarchys_usage_error() -> None:
    with pytest.raises(UsageError) as err:
        load_class("samples.counter.counter")
    assert str(err.value) == "'samples.counter.counter' is not MODULE:CLASS"
    assert UsageError.__mro__[1:3] == (AmbrosiaError, Exception)
