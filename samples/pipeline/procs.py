"""The demo's child processes: started with their output in a log file each, killed with
``kill -9`` or stopped with SIGTERM, and found by their parent (the coordinator that
``ambrosia run`` starts beside the immortal)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ambrosia_core import processes
from ambrosia_core.processes import ChildError

__all__ = ["Child", "ChildError", "children_of", "child_env", "interrupt_between_starts"]

ROOT = Path(__file__).resolve().parents[2]


class _Starting:
    depth = 0  # inside a start: a Ctrl-C waits until the child is known
    interrupted = False


def interrupt_between_starts() -> None:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt as usual, except while a child is being
    started: then it waits until the child is known, so that the clean-up stops it too (an
    interrupt inside ``Popen`` left a child no one knew of running)."""

    def on_sigint(_signum: int, _frame: object) -> None:
        if _Starting.depth:
            _Starting.interrupted = True
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)


@contextlib.contextmanager
def _starting() -> Iterator[None]:
    _Starting.depth += 1
    try:
        yield
    finally:
        _Starting.depth -= 1
    if not _Starting.depth and _Starting.interrupted:
        _Starting.interrupted = False
        raise KeyboardInterrupt


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every child: the repository importable, Spark on loopback, and
    no ``MASTER`` (PySpark reads it and ``.remote()`` then fails)."""
    env = {k: v for k, v in os.environ.items() if k != "MASTER"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.update(extra or {})
    return env


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


class Child:
    """One child process, ``python -m MODULE ARGS`` by default, its stdout and stderr
    appended to ``log``; it can be started again after it ended (same arguments). Each run
    is an ``ambrosia_core.processes.Child`` reading the log from where the run began."""

    def __init__(self, name: str, args: Sequence[str], log: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.args = list(args)
        self.log = log
        self.env = child_env(env)
        self.run: processes.Child | None = None

    def start(self) -> Child:
        with _starting():
            self.run = processes.Child.start([sys.executable, *self.args], name=self.name,
                                             env=self.env, cwd=ROOT, log=self.log)
        return self

    def _started(self) -> processes.Child:
        if self.run is None:
            raise ChildError(f"{self.name} was never started")
        return self.run

    @property
    def proc(self) -> subprocess.Popen[str] | None:
        return None if self.run is None else self.run.proc

    @property
    def pid(self) -> int:
        return self._started().pid

    def alive(self) -> bool:
        return self.run is not None and self.run.alive()

    def output(self) -> str:
        """What this run of the process has written so far."""
        return self._started().output()

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        """Wait until this run's output holds ``text``.

        Raises:
            ChildError: it ended first, or ``timeout`` seconds passed.
        """
        self._started().wait_for(text, timeout)

    def last_line(self) -> str:
        lines = self._started().last_lines(1)
        return lines[-1] if lines else "(no output)"

    def kill9(self) -> None:
        """``kill -9`` of this process alone (its children are left to notice)."""
        if self.run is not None:
            self.run.send_signal(signal.SIGKILL)
            self.run.wait()

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for it to end; its exit code, or None."""
        return None if self.run is None else self.run.wait(timeout)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (an ordinary stop), then ``kill -9`` of its whole process group, so
        nothing of it outlives the demo."""
        if self.run is not None:
            self.run.stop(timeout)
