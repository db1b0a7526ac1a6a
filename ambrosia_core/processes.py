"""Child processes that tests, demos and supervisors start, watch and stop.

A child is started in its own session, so that it leads a process group of its own: what
it starts in turn (``ambrosia run`` starts a coordinator, ``spark-submit`` a JVM) is in that
group, and stopping the group leaves nothing behind. Its output is either read line by
line from a pipe by a daemon thread (kept in memory) or appended by the child itself to a
log file (read back from where this run began), and a caller waits until a line appears.

A stop is an ordinary stop first (SIGTERM, so the child can finish what it writes), then
SIGKILL of the whole group once the child has ended or its time is up: a grandchild that
ignores SIGTERM, or that the child left running, goes too. ``stop_process`` does the same
for a process started some other way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Self

from .errors import AmbrosiaError

__all__ = [
    "Child",
    "ChildEndedError",
    "ChildError",
    "ChildTimeoutError",
    "exit_status",
    "kill_process",
    "stop_process",
]

_LAST_LINES = 20  # how many of its last lines an error about a child shows
_POLL_SECONDS = 0.1  # how often a log file is read again while waiting
_READER_JOIN_SECONDS = 10.0


class ChildError(AmbrosiaError):
    """A child process did not start, or did not do what was awaited of it."""


class ChildEndedError(ChildError):
    """The child ended before the awaited line appeared.

    Attributes:
        name: what the child is, as the message names it.
        text: the text that was awaited.
        returncode: its exit code (negative: the signal that ended it).
        last_lines: its last lines of output.
    """

    def __init__(self, name: str, text: str, returncode: int, last_lines: Sequence[str],
                 where: str = "") -> None:
        self.name = name
        self.text = text
        self.returncode = returncode
        self.last_lines = list(last_lines)
        super().__init__(f"{name} ended ({exit_status(returncode)}) before saying {text!r}"
                         f"{where}{_tail(last_lines)}")


class ChildTimeoutError(ChildError, TimeoutError):
    """The awaited line did not appear in time; the child is still running.

    Attributes:
        name: what the child is, as the message names it.
        text: the text that was awaited.
        timeout: the seconds waited.
        last_lines: its last lines of output.
    """

    def __init__(self, name: str, text: str, timeout: float, last_lines: Sequence[str],
                 where: str = "") -> None:
        self.name = name
        self.text = text
        self.timeout = timeout
        self.last_lines = list(last_lines)
        super().__init__(f"{name} did not say {text!r} within {timeout:g} s{where}"
                         f"{_tail(last_lines)}")


def exit_status(returncode: int) -> str:
    """``exit code 3``, or ``killed by SIGKILL`` for a child a signal ended."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _tail(lines: Sequence[str]) -> str:
    if not lines:
        return "; it said nothing"
    return "; its last lines:\n" + "\n".join(f"  {line}" for line in lines)


def kill_process(proc: subprocess.Popen[str] | subprocess.Popen[bytes], *,
                 group: bool = True) -> int:
    """``kill -9`` of ``proc`` and, with ``group``, of its whole process group (it must
    have been started in its own session), even if ``proc`` itself has already ended: its
    children may not have. Waits for ``proc`` and returns its exit code."""
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    return proc.wait()


def stop_process(proc: subprocess.Popen[str] | subprocess.Popen[bytes],
                 timeout: float = 20.0, *, group: bool = True,
                 terminate_group: bool = False) -> int:
    """An ordinary stop of ``proc``: SIGTERM, a wait of up to ``timeout`` seconds, then
    ``kill_process`` (with ``group``, the whole process group, whether or not ``proc``
    ended in time, so that nothing of it outlives the stop). Returns its exit code.

    Args:
        group: ``proc`` leads its own process group (it was started in its own session).
        terminate_group: SIGTERM goes to the whole group, not to ``proc`` alone (for a
            child that does not pass the signal on to its own children).
    """
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if terminate_group:
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    return kill_process(proc, group=group)


class Child:
    """A child process, usually leading its own process group, whose output lines can be
    awaited.

    Wraps a started ``Popen``: if it has a text pipe (its stdout, or else its stderr), a
    daemon thread reads the pipe and keeps its lines; otherwise its output goes to ``log``,
    a file it appends to, read from offset ``log_start`` (where this run of it began).
    ``Child.start`` starts one either way.

    Args:
        proc: the process.
        name: what it is, for errors ("sink"; by default the class's ``default_name``).
        log: the file its output goes to, when it has no pipe.
        log_start: the offset in ``log`` where its output begins.
        group: ``proc`` leads its own process group (it was started with
            ``start_new_session=True``), which ``kill()`` and ``stop()`` then end as a
            whole; else they signal ``proc`` alone.

    Raises:
        ChildError: it has neither a pipe nor a log file.
    """

    default_name = "the child"

    def __init__(self, proc: subprocess.Popen[str], *, name: str | None = None,
                 log: Path | None = None, log_start: int = 0, group: bool = True) -> None:
        self.proc = proc
        self.group = group
        self.name = name if name is not None else self.default_name
        self.log = log
        self._log_start = log_start
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        pipe = proc.stdout if proc.stdout is not None else proc.stderr
        if pipe is not None:
            self._reader = threading.Thread(target=self._read, args=(pipe,), daemon=True,
                                            name=f"output of {self.name}")
            self._reader.start()
        elif log is None:
            raise ChildError(f"{self.name} has neither an output pipe nor a log file to watch")

    @classmethod
    def start(cls, argv: Sequence[str], *, name: str | None = None,
              env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
              log: Path | None = None, keep_stdout: bool = True) -> Self:
        """Start ``argv`` in its own session, stdin from ``/dev/null``.

        Its stderr, and its stdout unless ``keep_stdout`` is false (then it is discarded),
        go to a pipe whose lines are kept, or are appended to ``log`` if given.
        """
        child_env = None if env is None else dict(env)
        if log is None:
            # One pipe: the child's stdout (stderr joined to it), or its stderr alone.
            out = subprocess.PIPE if keep_stdout else subprocess.DEVNULL
            err = subprocess.STDOUT if keep_stdout else subprocess.PIPE
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=child_env, cwd=cwd, text=True, start_new_session=True)
            return cls(proc, name=name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            start = os.fstat(f.fileno()).st_size
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                    stdout=f if keep_stdout else subprocess.DEVNULL, stderr=f,
                                    env=child_env, cwd=cwd, text=True, start_new_session=True)
        return cls(proc, name=name, log=log, log_start=start)

    def _read(self, pipe: IO[str]) -> None:
        with contextlib.suppress(OSError, ValueError), pipe:  # closed under it: it is gone
            for line in pipe:
                with self._cond:
                    self._lines.append(line.rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """Its exit code once it has ended and been waited for, else None."""
        return self.proc.poll()

    @property
    def lines(self) -> list[str]:
        """The lines it has written so far (a copy), without their line ends."""
        if self._reader is None:
            return self.output().splitlines()
        with self._cond:
            return list(self._lines)

    def output(self) -> str:
        """What it has written so far."""
        if self._reader is not None:
            with self._cond:
                return "".join(line + "\n" for line in self._lines)
        assert self.log is not None
        with open(self.log, "rb") as f:
            f.seek(self._log_start)
            return f.read().decode(errors="replace")

    def last_lines(self, count: int = _LAST_LINES) -> list[str]:
        """Its last ``count`` lines of output that are not blank."""
        return [line for line in self.lines if line.strip()][-count:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _done(self) -> bool:
        """Ended, and all of its output read."""
        return self.proc.poll() is not None and (
            self._reader is None or not self._reader.is_alive())

    def wait_for(self, text: str, timeout: float = 60.0, count: int = 1) -> str:
        """Wait until ``text`` has appeared in ``count`` of its lines; return the last of
        them.

        Raises:
            ChildEndedError: it ended first.
            ChildTimeoutError: ``timeout`` seconds passed first.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                done = self._done()  # before reading: its last words are then in the lines
                hits = [line for line in self._lines_locked() if text in line]
                if len(hits) >= count:
                    return hits[count - 1]
                where = f" (log {self.log})" if self._reader is None else ""
                if done:
                    raise ChildEndedError(self.name, text, self.proc.wait(),
                                          self._last_locked(), where)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChildTimeoutError(self.name, text, timeout, self._last_locked(),
                                            where)
                step = 0.5 if self._reader is not None else _POLL_SECONDS
                self._cond.wait(min(left, step))

    def _lines_locked(self) -> list[str]:
        return self._lines if self._reader is not None else self.output().splitlines()

    def _last_locked(self) -> list[str]:
        return [line for line in self._lines_locked() if line.strip()][-_LAST_LINES:]

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (None: for ever) for it to end; its exit code,
        or None if it is still running."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._join_reader()
        return code

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to it alone (not its group), if it is still running."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def kill(self) -> int:
        """``kill -9`` of its whole process group, as when the machine running it dies;
        returns its exit code."""
        code = kill_process(self.proc, group=self.group)
        self._join_reader()
        return code

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM to it, a wait of up to ``timeout`` seconds, then ``kill -9`` of its
        whole process group (so nothing of it outlives the stop); returns its exit code."""
        code = stop_process(self.proc, timeout, group=self.group)
        self._join_reader()
        return code

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(_READER_JOIN_SECONDS)
