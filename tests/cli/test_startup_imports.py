"""The light commands start light: each runs in a fresh interpreter, and what it imported
is checked afterwards. Most of a test run's CPU goes to starting processes, and a command
that imports every other command's modules costs several times what it does.

A module named here arriving again (a top-level import put back in a command module, a
package ``__init__`` that imports its heaviest part) fails the test with its name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ambrosia_core.ports import free_ports

# What only the command that needs it may load: the coordinator's asyncio shell and its
# replicas, the Raft client and pyzmq, the binding's runtime and programming model, the
# replay bar, the certificates' library, and asyncio itself.
HEAVY = ("ambrosia_ic.coordinator", "ambrosia_ic.replication", "ambrosia_ic.raft", "zmq",
         "ambrosia_py.runtime", "ambrosia_py.immortal", "tqdm", "cryptography", "asyncio")

_PROBE = """
import json, sys
from {module} import main
try:
    code = main({argv!r})
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
print("\\n" + json.dumps({{"code": code, "modules": sorted(sys.modules)}}))
"""


def _imported(module: str, argv: list[str], home: Path) -> tuple[int, str, set[str]]:
    """Run ``module``'s ``main(argv)`` in a fresh interpreter: its exit code, what it
    printed, and the modules it had imported when it returned."""
    r = subprocess.run([sys.executable, "-c", _PROBE.format(module=module, argv=argv)],
                       env=dict(os.environ, AMBROSIA_HOME=str(home)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out, _, last = r.stdout.rstrip("\n").rpartition("\n")
    probe = json.loads(last)
    return probe["code"], out, set(probe["modules"])


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY
                  or any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(("module", "argv"), [
    ("ambrosia_cli.main", ["--help"]),
    ("ambrosia_cli.main", ["register-instance", "--help"]),
    ("ambrosia_cli.main", ["tls", "init", "--help"]),
    ("ambrosia_ic.cli", ["--help"]),
    ("ambrosia_ic.cli", ["ic", "--help"]),
])
def test_help_imports_no_command(tmp_path: Path, module: str, argv: list[str]) -> None:
    code, out, modules = _imported(module, argv, tmp_path / "home")
    assert code == 0 and "usage: ambrosia" in out
    assert _heavy(modules) == []


def test_a_registration_and_the_list_import_no_coordinator(tmp_path: Path) -> None:
    rp, sp, ip = free_ports(3)
    code, out, modules = _imported("ambrosia_cli.main", [
        "register-instance", "-i", "svc", "-rp", str(rp), "-sp", str(sp), "-p", str(ip),
        "-l", str(tmp_path / "logs")], tmp_path / "home")
    assert (code, out.split(":")[0]) == (0, "registered svc")
    assert _heavy(modules) == []
    code, out, modules = _imported("ambrosia_cli.main", ["list"], tmp_path / "home")
    assert code == 0 and "svc" in out
    assert _heavy(modules) == []


def test_the_probe_sees_a_heavy_import(tmp_path: Path) -> None:
    # The check itself can fail: a command that does load the binding's runtime is caught.
    code, out, modules = _imported("ambrosia_cli.main", ["run", "--help"], tmp_path / "home")
    assert code == 0 and "ambrosia run" in out
    assert "ambrosia_py.runtime" in _heavy(modules)


_CLASS_PROBE = """
import json, sys
from ambrosia_ic import registry
from ambrosia_ic.commands.ic import _coordinator_class
reg = registry.load({name!r})
cls = _coordinator_class(reg)
print(json.dumps({{"cls": cls.__name__, "modules": sorted(sys.modules)}}))
"""


@pytest.mark.parametrize(("flags", "cls", "loaded"), [
    ([], "StandaloneCoordinator", False),
    (["--active-active"], "SharedDirReplica", False),
])
def test_a_coordinator_on_files_loads_no_raft_client(tmp_path: Path, flags: list[str],
                                                       cls: str, loaded: bool) -> None:
    """``ambrosia ic`` imports the coordinator its registration needs, and only that: a
    start on files pays nothing for pyzmq and the Raft client (a start's largest import)."""
    home = tmp_path / "home"
    rp, sp, ip = free_ports(3)
    code, _, _ = _imported("ambrosia_cli.main", [
        "register-instance", "-i", "svc", "-rp", str(rp), "-sp", str(sp), "-p", str(ip),
        "-l", str(tmp_path / "logs"), *flags], home)
    assert code == 0
    r = subprocess.run([sys.executable, "-c", _CLASS_PROBE.format(name="svc")],
                       env=dict(os.environ, AMBROSIA_HOME=str(home)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    probe = json.loads(r.stdout)
    assert probe["cls"] == cls
    raft = [m for m in probe["modules"] if m.split(".")[0] == "zmq" or m in (
        "ambrosia_ic.raft.client", "ambrosia_ic.replication.raft",
        "ambrosia_ic.logstore.raft_store")]
    assert bool(raft) == loaded, raft
