"""Is a log directory usable? Checked when an instance is registered and again before its
coordinator starts, so that a bad directory is one line up front, not a failure deep in
the first write.

Permission bits do not say whether a write will succeed (root ignores them; a read-only
mount or an immutable directory refuses root too), so the check creates a file and
removes it again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from ambrosia_core.durable import make_dirs
from ambrosia_core.errors import CoordinatorError

__all__ = ["check_log_dir"]

_PROBE_PREFIX = ".ambrosia-probe-"


def check_log_dir(path: str | os.PathLike[str], *, create: bool = True) -> Path:
    """Make sure ``path`` is a directory this process can create files in.

    Args:
        path: the log directory.
        create: create it (and its parents) if it does not exist yet.

    Returns:
        the path, as a ``Path``.

    Raises:
        CoordinatorError: one line naming the directory and why it cannot be used (a file
            in its place or in place of a parent, not creatable, not writable).
    """
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise CoordinatorError(f"log directory {d} is a file, not a directory")
    if not d.exists():
        blocker = _file_among_parents(d)
        if blocker is not None:
            raise CoordinatorError(
                f"log directory {d} cannot be created: {blocker} is a file, not a directory")
        if not create:
            return d
        try:
            make_dirs(d)
        except OSError as err:
            raise CoordinatorError(
                f"log directory {d} cannot be created: {err.strerror or err}") from None
    _probe_write(d)
    return d


def _file_among_parents(d: Path) -> Path | None:
    """The nearest existing ancestor of ``d`` if it is not a directory."""
    for parent in d.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _probe_write(d: Path) -> None:
    probe = d / f"{_PROBE_PREFIX}{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as err:
        raise CoordinatorError(
            f"log directory {d} is not writable: {err.strerror or err}") from None
    try:
        os.write(fd, b"\0")
    except OSError as err:  # a full disk, say
        raise CoordinatorError(
            f"log directory {d} is not writable: {err.strerror or err}") from None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
