"""A disk that can lose power, for tests: the unsynced file system (``tests.power.fs``)
mounted over a backing directory in its own process, cut and mounted again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PowerDisk", "mounted", "unavailable"]

_ROOT = Path(__file__).resolve().parents[2]


def unavailable() -> str | None:
    """Why power cuts cannot run here (one line), or None when they can."""
    if sys.platform != "linux":
        return "power cuts need Linux's FUSE"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine: power-cut tests need FUSE"
    if shutil.which("fusermount3") is None:
        return "no fusermount3: install Debian's fuse3 (make install does)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as err:
        return f"mfusepy cannot load libfuse3 ({err}): install Debian's fuse3"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not usable by this user: power-cut tests need root"
    return None


class PowerDisk:
    """``mount`` is where the node's files live; ``cut()`` drops what was not synced.

    The node's processes must be dead before a cut (a real power cut kills them too)."""

    def __init__(self, base: Path) -> None:
        self.backing = base / "backing"
        self.mount = base / "disk"
        self.control = base / "control.sock"
        self.log = base / "fs.log"  # what the file system says (a pipe could fill and block it)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.cuts = 0
        self.reports: list[list[str]] = []
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.power.fs", str(self.backing), str(self.mount),
                 "--control", str(self.control)],
                cwd=_ROOT, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 10
        while not (os.path.ismount(self.mount) and self.control.exists()):
            if self._proc.poll() is not None:
                err = self.log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError("the unsynced file system did not mount: "
                                   + " / ".join(err))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the unsynced file system did not mount within 10 s")
            time.sleep(0.02)

    def _ask(self, command: str) -> list[str]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.control))
            s.sendall(command.encode() + b"\n")
            data = s.makefile("rb").readline()
        result = json.loads(data)
        if not isinstance(result, list):
            raise RuntimeError(f"the unsynced file system refused {command!r}: {result}")
        return [str(line) for line in result]

    def losses(self) -> list[str]:
        """What a cut now would drop."""
        return self._ask("losses")

    def cut(self) -> list[str]:
        """Power off: drop everything not synced and unmount. Returns what was dropped."""
        report = self._ask("cut")
        assert self._proc is not None
        self._proc.wait(timeout=30)
        self.control.unlink(missing_ok=True)
        self.cuts += 1
        self.reports.append(report)
        return report

    def restart(self) -> list[str]:
        """A power cut and the machine back up: the same files, minus what was unsynced."""
        report = self.cut()
        self.start()
        return report

    def complaints(self) -> list[str]:
        """Errors the file system logged (an operation it failed unexpectedly)."""
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [ln for ln in text.splitlines() if ln.startswith("Uncaught exception")]

    def stop(self) -> None:
        """Unmount (what is unsynced stays: this is an orderly shutdown)."""
        if self._proc is not None and self._proc.poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], check=False,
                           capture_output=True)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self.control.unlink(missing_ok=True)


@contextlib.contextmanager
def mounted(base: Path) -> Iterator[PowerDisk]:
    """A started disk under ``base``, stopped after; a test is skipped with one line where
    FUSE is missing (pytest's summary counts it)."""
    why = unavailable()
    if why is not None:
        pytest.skip(f"power cuts not run: {why}")
    d = PowerDisk(base)
    d.start()
    try:
        yield d
    finally:
        d.stop()
