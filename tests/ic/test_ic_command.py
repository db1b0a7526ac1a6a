"""``ambrosia ic`` as the user of another language's binding runs it: an instance whose
history has gone astray is refused in one line naming ``ambrosia ic ... --start-afresh``
with nothing written, and that option starts it afresh."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from .conftest import Harness, wait_until


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

