"""Start a coordinator process for a registered instance and wait until it listens."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ambrosia_py.errors import CoordinatorError

__all__ = ["READY_PREFIX", "start_coordinator", "start_process"]

READY_PREFIX = "ambrosia-ic ready:"


def start_process(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    timeout: float = 30.0,
    stderr: Any = None,
) -> subprocess.Popen[str]:
    """Run ``python -m ambrosia_ic ARGS`` and return once it prints its readiness line.

    ``home`` sets ``AMBROSIA_HOME`` for the child. The child's stdout stays a pipe (the
    caller may read what follows the readiness line); its stderr goes to ``stderr``
    (default: inherited).

    Raises:
        CoordinatorError: the process exited, or did not get ready within ``timeout``.
    """
    child_env = dict(os.environ if env is None else env)
    if home is not None:
        child_env["AMBROSIA_HOME"] = os.fspath(home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ambrosia_ic", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=child_env,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    # A thread reads, so a child that hangs before printing cannot hang the caller.
    got = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith(READY_PREFIX):
                break
        got.set()

    threading.Thread(target=read, daemon=True).start()
    if not got.wait(timeout) or not lines or not lines[-1].startswith(READY_PREFIX):
        proc.kill()
        proc.wait()
        raise CoordinatorError(
            f"ambrosia {' '.join(args)} did not become ready (exit code {proc.returncode})"
        )
    return proc


def start_coordinator(
    name: str,
    replica: int = 0,
    *,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    timeout: float = 30.0,
    stderr: Any = None,
) -> subprocess.Popen[str]:
    """Start ``ambrosia ic`` for a registered instance; returns once it is listening
    on its receive and send ports."""
    return start_process(
        ["ic", "--instance-name", name, "--replica", str(replica)],
        env=env, home=home, timeout=timeout, stderr=stderr,
    )
