"""Files and directories that survive a power cut: the one way every process makes them.

A file that must survive a crash or a power loss whole (a checkpoint, a seal, a
registration, the link secret, the upgrade mark) is written to a temporary name beside
it, fsynced, renamed over the target (or linked to it, when the target must not exist
yet), and then the directory is fsynced: without that last step the rename itself may be
lost at a power cut, and the old file (or none) comes back. Readers therefore see the
old file whole, the new file whole, or (for a new name) nothing. A new directory's entry
is synced into its parent (``make_dirs``) before anything in it is relied on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

__all__ = ["fsync_dir", "make_dirs", "replace_durably", "temporary_name"]


def fsync_dir(d: Path) -> None:
    """Make the entries of directory ``d`` (creations, renames, removals) durable.

    Raises:
        NotADirectoryError: ``d`` is not a directory.
    """
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(d: Path) -> None:
    """Create directory ``d`` and its missing parents, durably: each new directory's entry
    is fsynced in its parent, so that a power cut cannot take back a directory whose files
    were made durable (an instance's log directory, the registry's). Like
    ``mkdir(parents=True, exist_ok=True)`` otherwise.

    Raises:
        FileExistsError: ``d`` (or a parent) exists and is not a directory.
    """
    missing = []
    p = d
    while not p.exists():
        missing.append(p)
        p = p.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a racing creator: sync it anyway
            new.mkdir()
        fsync_dir(new.parent)
    if not d.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", str(d))


def temporary_name(path: Path) -> Path:
    """A fresh hidden name beside ``path`` (``.<name>.<hex>.tmp``): writers racing for
    the same target never share one."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def replace_durably(path: Path, data: bytes | Iterable[bytes], *, mode: int = 0o644,
                    exclusive: bool = False) -> None:
    """Write ``data`` (bytes, or pieces written in order) as ``path``, whole or not at all.

    Args:
        path: the target; its directory must exist.
        data: the content, or an iterable of pieces (a checkpoint streams its raw bytes
            and computes its check bytes while they pass).
        mode: the permission bits of a new file.
        exclusive: the target must not exist yet; the first writer wins.

    Raises:
        FileExistsError: ``exclusive`` and ``path`` already exists (nothing is changed).
        OSError: the write failed; the temporary file is removed and ``path`` is untouched.
    """
    tmp = temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            for piece in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
                _write_all(fd, piece)
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(tmp, path)  # fails if the target exists, unlike a rename
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # gone after a rename; a link leaves it behind
    fsync_dir(path.parent)


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
