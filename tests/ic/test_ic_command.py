"""``ambrosia ic`` as the user of another language's binding runs it: an instance whose
history has gone astray is refused in one line naming ``ambrosia ic ... --start-afresh``
with nothing written, and that option starts it afresh; a coordinator whose links speak
TLS says so in its readiness line."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.launcher import wait_until

from ..pki import make_pki
from .conftest import Harness


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def test_ic_starts_afresh_on_purpose_and_otherwise_refuses_naming_itself(
        harness: Harness) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    wait_until((harness.home / "instances" / "alpha.started").exists, "the first start kept")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    gone = harness.instance_dir("alpha")
    shutil.rmtree(gone)  # its history is gone astray

    before = _snapshot(harness.tmp)
    done = harness.cli("ic", "-i", "alpha")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"ambrosia: error: alpha has started before, but its log directory {gone} holds no "
        "log to recover from (moved, removed or emptied?); register it again with the "
        "directory that holds its log (ambrosia register-instance -i alpha -l DIR), or "
        "start it afresh on purpose with ambrosia ic -i alpha --start-afresh"]
    assert _snapshot(harness.tmp) == before  # not even the directory is made again

    proc = harness.start("alpha", options=["--start-afresh"])
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    assert d.events[0] == "take-becoming-primary-checkpoint"  # a first start
    assert (f"ambrosia-ic: alpha: --start-afresh: alpha starts afresh if its log directory "
            f"{gone} holds no log") in harness.stderr_of(proc)


def _ready_line(harness: Harness, *options: str) -> str:
    with subprocess.Popen([sys.executable, "-m", "ambrosia_cli", "ic", "-i", "alpha",
                           *options], env=harness.env, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as p:
        try:
            assert p.stdout is not None
            return p.stdout.readline().strip()
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


def test_the_readiness_line_says_when_links_speak_tls(harness: Harness) -> None:
    reg = harness.register("alpha")
    plain = (f"ambrosia-ic ready: instance=alpha receive={reg.receive_port} "
             f"send={reg.send_port} ic={reg.ic_port}")
    assert _ready_line(harness) == plain
    ours, _, _ = make_pki(harness.tmp / "pki")
    assert _ready_line(harness, *ours.args()) == f"{plain} tls=on"
