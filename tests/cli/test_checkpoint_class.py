"""A class that cannot load the instance's checkpoint is refused by ``ambrosia run``
before its class record or its registration is touched (``log dump`` still names the
class that ran), in one line that fits the case: an instance upgraded already is told to
run the class it holds, an older one to upgrade with ``--upgrade-to``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_cli import local_coordinator
from ambrosia_py.runtime.checkpoint import class_problem
from ambrosia_py.testing import start_immortal
from tests.cli.relay_app import Relay, RelayV2
from tests.launcher import ROOT, wait_until

RELAY, RELAY_V2 = "tests.cli.relay_app:Relay", "tests.cli.relay_app:RelayV2"


def test_the_problem_fits_the_case() -> None:
    assert class_problem("Relay", 0, Relay) is None
    assert class_problem("RelayV2", 1, Relay, RelayV2) is None  # upgraded: it runs V2
    assert class_problem("RelayV2", 1, Relay) == (
        "the checkpoint holds RelayV2 version 1, but the code is Relay version 0: the "
        "instance was upgraded to RelayV2 already; run it with that class")
    assert class_problem("Relay", 0, RelayV2) == (
        "the checkpoint holds Relay version 0, but the code is RelayV2 version 1: to upgrade "
        "it, run the class it holds, Relay, with RelayV2 as the upgrade target (--upgrade-to)")
    assert class_problem("Other", 0, Relay) == (
        "the checkpoint holds Other version 0, but the code is Relay version 0: run it with "
        "the class it holds, Other (to change classes, give the new one a later version and "
        "make it the upgrade target)")


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMBROSIA_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def _ran(home: Path, target: str) -> None:
    """One start of ``target`` as instance ``sq``, kept (its first start logged)."""
    p = start_immortal(target, "sq", home=home, cwd=ROOT)
    try:
        wait_until((home / "instances" / "sq.started").exists, "the first start kept")
        assert p.stop() == 0, p.lines[-5:]
    finally:
        p.kill()


@pytest.mark.integration
def test_an_upgraded_instance_is_not_run_with_its_old_class(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _ran(home, RELAY_V2)
    before = _snapshot(home)
    done = _run(home, RELAY, "-i", "sq")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "ambrosia run: error: sq: the checkpoint holds RelayV2 version 1, but the code is "
        "Relay version 0: the instance was upgraded to RelayV2 already; run it with that "
        f"class: ambrosia run {RELAY_V2} -i sq"]
    assert _snapshot(home) == before  # the class record still says RelayV2
    dump = subprocess.run([sys.executable, "-m", "ambrosia_cli", "log", "dump", "-i", "sq"],
                          env=dict(os.environ, AMBROSIA_HOME=str(home)), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert f"as {RELAY_V2} sees them" in dump.stdout


@pytest.mark.integration
def test_an_older_instance_is_told_to_upgrade(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _ran(home, RELAY)
    before = _snapshot(home)
    done = _run(home, RELAY_V2, "-i", "sq")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "ambrosia run: error: sq: the checkpoint holds Relay version 0, but the code is "
        "RelayV2 version 1: to upgrade it, run the class it holds, Relay, with RelayV2 as "
        f"the upgrade target (--upgrade-to): ambrosia run {RELAY} -i sq --upgrade-to "
        f"{RELAY_V2}"]
    assert _snapshot(home) == before



@pytest.mark.integration
def test_an_interrupted_first_start_is_no_history_to_refuse(tmp_path: Path) -> None:
    """A first start cut short before its InitialMessage was logged is started again
    afresh, so another class may run the instance: the checkpoint it left is not held
    against that class."""
    home = tmp_path / "home"
    _ran(home, RELAY_V2)
    # What a first start killed after its checkpoint and before its log leaves.
    d = registry.instance_dir(registry.load("sq", home))
    for name in os.listdir(d):
        if name.startswith("serverlog"):
            os.unlink(d / name)
    (home / "instances" / "sq.started").unlink()
    assert local_coordinator.held_class(registry.load("sq", home)) is None
    p = start_immortal(RELAY, "sq", home=home, cwd=ROOT)  # primary: a first start
    try:
        assert p.stop() == 0, p.lines[-5:]
    finally:
        p.kill()
