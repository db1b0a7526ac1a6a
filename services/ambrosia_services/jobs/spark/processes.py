"""The Spark processes' helpers: their tools and environment, waiting for a port (with a
progress bar on a terminal) and stopping a process group. No pyspark import."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from ambrosia_core.addresses import Address
from ambrosia_core.processes import stop_process

from ..errors import SparkServerError

__all__ = ["StartProgress", "port_open", "spark_env", "spark_tool", "stop_group",
           "wait_for_port"]


def spark_tool(name: str) -> str:
    """The path of ``spark-submit``/``spark-class`` beside this interpreter (the venv's)."""
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise SparkServerError(f"{name} not found beside {sys.executable} nor on PATH")
    return found


def spark_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment Spark processes get: loopback only, never ``MASTER`` (PySpark reads
    it and ``.remote()`` then fails), the venv's bin first on PATH, no daemonizing."""
    env = {k: v for k, v in os.environ.items() if k != "MASTER"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_NO_DAEMONIZE"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_for_port(
    host: str, port: int, timeout: float, process: subprocess.Popen[bytes] | None = None,
    tick: Callable[[float], None] | None = None,
) -> None:
    """Wait until ``host:port`` accepts connections; ``tick`` is told the seconds waited.

    Raises:
        SparkServerError: the process exited first, or the time ran out.
    """
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SparkServerError(
                f"process {process.pid} exited with {process.returncode} before port {port} opened"
            )
        if port_open(host, port):
            return
        if tick is not None:
            tick(time.monotonic() - start)
        time.sleep(0.1)
    raise SparkServerError(f"port {Address(host, port)} did not open within {timeout:.0f} s")


class StartProgress:
    """The JVM's silent start-up, shown on a terminal as a bar of the seconds waited
    against the last start's (kept beside the log), so that it has a time left; quiet
    anywhere else.

    Args:
        record: the file that keeps the last start's seconds.
        terminal: draw the bar (default: when ``out`` is a terminal).
        out: where the bar is drawn (stderr).
        redraw: the fewest seconds between two drawings.
    """

    def __init__(self, record: Path, *, terminal: bool | None = None,
                 out: TextIO | None = None, redraw: float = 0.5) -> None:
        self.record = record
        self.redraw = redraw
        self.out = sys.stderr if out is None else out
        self.terminal = self.out.isatty() if terminal is None else terminal
        self._bar: tqdm[None] | None = None

    def last(self) -> float | None:
        """The last start's seconds, if one was recorded."""
        try:
            return float(self.record.read_text())
        except (OSError, ValueError):
            return None

    def tick(self, elapsed: float) -> None:
        if not self.terminal:
            return
        if self._bar is None:
            last = self.last()
            self._bar = tqdm(total=round(last, 1) if last else None,
                             desc="starting Spark Connect", unit="s", file=self.out,
                             bar_format="{desc}: {bar} {n:.1f}/{total} s, about "
                                        "{remaining} left" if last else
                             "{desc}: {n:.1f} s (the first start: no time left known)",
                             leave=False, mininterval=self.redraw)
        self._bar.update(round(elapsed, 1) - self._bar.n)

    def done(self, elapsed: float | None) -> None:
        """The start ended; ``elapsed`` (when it succeeded) is kept for the next one."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if elapsed is not None:
            with contextlib.suppress(OSError):
                self.record.write_text(f"{elapsed:.1f}\n")


def stop_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to its process group (the JVM and what it started), then SIGKILL of the
    group after ``grace`` seconds."""
    stop_process(process, grace, terminate_group=True)
