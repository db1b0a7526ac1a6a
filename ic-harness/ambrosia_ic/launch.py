"""Start a coordinator process for a registered instance and wait until it listens.

A coordinator that cannot start says why in one line on stderr (``ambrosia: error: ...``)
before its readiness line would have come. That line becomes the ``CoordinatorError``
raised here, instead of being printed by the child as well: whoever started the
coordinator reports it once, in its own words.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ambrosia_core.errors import CoordinatorError

__all__ = ["READY_PREFIX", "STOPPED_PREFIX", "CoordinatorProcess", "start_coordinator",
           "start_process"]

READY_PREFIX = "ambrosia-ic ready:"
STOPPED_PREFIX = "ambrosia-ic stopped:"  # on stdout when SIGTERM or SIGINT stopped it
ERROR_PREFIX = "ambrosia: error: "
_COPY_JOIN_SECONDS = 5.0


class CoordinatorProcess(subprocess.Popen[str]):
    """A started ``ambrosia`` process whose stderr is copied to where the caller asked.

    The copy runs in a thread; ``wait()`` and a ``poll()`` that finds the process ended
    also wait for the copy to finish, so that the child's last words are in the caller's
    file once the caller knows it exited.
    """

    _copier: threading.Thread | None = None
    _copy: _StderrCopy | None = None

    @property
    def last_stderr_line(self) -> str:
        """The last non-empty line the process wrote on stderr ("" if none)."""
        return self._copy.last_line if self._copy is not None else ""

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        self._join_copier()
        return code

    def poll(self) -> int | None:
        code = super().poll()
        if code is not None:
            self._join_copier()
        return code

    def _join_copier(self) -> None:
        copier = self._copier
        if copier is not None and copier is not threading.current_thread():
            copier.join(_COPY_JOIN_SECONDS)


class _StderrCopy:
    """Copies the child's stderr lines to ``dest`` as they come, except that an error line
    before readiness is kept back: it is the reason the start failed."""

    def __init__(self, dest: Any) -> None:
        self.dest = dest
        self.ready = False
        self.reason: str | None = None
        self.last_line = ""

    def run(self, stream: Any) -> None:
        with stream:
            for line in stream:
                if line.strip():
                    self.last_line = line.strip()
                if not self.ready and line.startswith(ERROR_PREFIX):
                    self.reason = line[len(ERROR_PREFIX):].strip()
                    continue
                self._write(line)

    def _write(self, line: str) -> None:
        dest = self.dest
        if dest == subprocess.DEVNULL:
            return
        try:
            if dest is None:
                sys.stderr.write(line)
                sys.stderr.flush()
            elif isinstance(dest, int):
                os.write(dest, line.encode("utf-8", "replace"))
            else:
                dest.write(line)
                dest.flush()
        except (OSError, ValueError):
            pass  # the destination went away (closed file, broken pipe): nothing to tell


def start_process(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    timeout: float = 90.0,
    stderr: Any = None,
    what: str | None = None,
    prefix: Sequence[str] = (),
) -> CoordinatorProcess:
    """Run ``python -m ambrosia_ic ARGS`` and return once it prints its readiness line.

    ``home`` sets ``AMBROSIA_HOME`` for the child. The default ``timeout`` outlasts the
    coordinator's wait for a port that a connection in TIME_WAIT still holds. The child's
    stdout stays a pipe (the caller may read what follows the readiness line); its stderr
    is copied, line by line, to ``stderr``: ``None`` (this process's stderr),
    ``subprocess.DEVNULL``, a file descriptor or a text file.

    Raises:
        CoordinatorError: the process exited before it was ready (the message is its own
            one-line reason), or did not get ready within ``timeout``; ``what`` names it
            (default ``ambrosia ARGS[0]``).

    ``prefix`` goes before the command line: a command that runs it elsewhere, such as
    ``ip netns exec NS`` (which execs in place, so the pid is the coordinator's).
    """
    child_env = dict(os.environ if env is None else env)
    if home is not None:
        child_env["AMBROSIA_HOME"] = os.fspath(home)
    proc = CoordinatorProcess(
        [*prefix, sys.executable, "-m", "ambrosia_ic", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    copy = _StderrCopy(stderr)
    proc._copy = copy
    # The copy owns the pipe: communicate() must not read it too.
    stream, proc.stderr = proc.stderr, None
    proc._copier = threading.Thread(target=copy.run, args=(stream,), daemon=True)
    proc._copier.start()
    lines: list[str] = []
    # A thread reads, so a child that hangs before printing cannot hang the caller.
    got = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith(READY_PREFIX):
                copy.ready = True
                break
        got.set()

    threading.Thread(target=read, daemon=True).start()
    in_time = got.wait(timeout)
    if in_time and lines and lines[-1].startswith(READY_PREFIX):
        return proc
    if in_time:
        proc.wait()  # it closed its stdout: it is exiting; wait() also ends the copy
    else:
        proc.kill()
        proc.wait()
    name = what or f"ambrosia {args[0] if args else ''}".strip()
    if copy.reason:
        raise CoordinatorError(f"{name} did not start: {copy.reason}")
    if not in_time:
        raise CoordinatorError(f"{name} did not become ready within {timeout:g} s")
    last = f": {copy.last_line}" if copy.last_line else ""
    raise CoordinatorError(f"{name} exited (code {proc.returncode}) before it was ready{last}")


def start_coordinator(
    name: str,
    replica: int = 0,
    *,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    timeout: float = 90.0,
    stderr: Any = None,
    options: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> CoordinatorProcess:
    """Start ``ambrosia ic`` for a registered instance; returns once it is listening
    on its receive and send ports.

    Args:
        options: more options of ``ambrosia ic`` (``--metrics ADDR``).
        prefix: what runs it elsewhere (``ip netns exec NS``), as for ``start_process``.

    Raises:
        CoordinatorError: it could not start; the message is the coordinator's reason.
    """
    return start_process(
        ["ic", "--instance-name", name, "--replica", str(replica), *options],
        env=env, home=home, timeout=timeout, stderr=stderr, prefix=prefix,
        what=f"the coordinator of {name}" + (f" (replica {replica})" if replica else ""),
    )
