"""File names of an instance directory, and which files a new checkpoint lets go.

See the package docstring for what each file holds.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from ambrosia_core.durable import fsync_dir
from ambrosia_core.errors import CoordinatorError

__all__ = [
    "CHECKPOINT_PREFIX",
    "DIGEST_PREFIX",
    "LOCK_NAME",
    "LOG_PREFIX",
    "SEAL_PREFIX",
    "checkpoint_path",
    "digest_path",
    "file_numbers",
    "log_path",
    "remove_checkpoint_temps",
    "remove_first_start_leftovers",
    "remove_uncommitted_version",
    "remove_unkept",
    "seal_path",
]

LOG_PREFIX = "serverlog"
CHECKPOINT_PREFIX = "serverchkpt"
DIGEST_PREFIX = "serverdigest"
SEAL_PREFIX = "serverseal"
LOCK_NAME = "serverlock"
# What ``durable.replace_durably`` writes checkpoint N under until it is whole.
_CHECKPOINT_TEMP = re.compile(rf"\.{CHECKPOINT_PREFIX}(\d+)\.[0-9a-f]+\.tmp")
# Errors of a directory that is not there (``Path.is_dir`` answers False to these).
_NOT_A_DIRECTORY = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def log_path(d: Path, n: int) -> Path:
    return d / f"{LOG_PREFIX}{n}"


def checkpoint_path(d: Path, n: int) -> Path:
    return d / f"{CHECKPOINT_PREFIX}{n}"


def digest_path(d: Path, n: int) -> Path:
    return d / f"{DIGEST_PREFIX}{n}"


def _names(d: Path) -> list[str]:
    """The names in ``d``; none if it is not a directory. One look: a start, a recovery
    and each pruning list the directory many times, and a stat first doubled each."""
    try:
        return os.listdir(d)
    except OSError as err:
        if err.errno in _NOT_A_DIRECTORY:
            return []
        raise


def file_numbers(d: Path, prefix: str) -> list[int]:
    """The N of every ``<prefix><N>`` in ``d``, ascending."""
    cut = len(prefix)
    return sorted(int(name[cut:]) for name in _names(d)
                  if name.startswith(prefix) and name[cut:].isdigit())


def remove_unkept(d: Path, keep: int, prefixes: Sequence[str],
                  ignore: Collection[int] = ()) -> int | None:
    """Keep the newest ``keep`` checkpoints (not counting ``ignore``: checkpoints known
    to be damaged) and every file from the oldest of them on; remove the ``<prefix><N>``
    files before it. Call only once the newest checkpoint is durable. Returns the
    number of the oldest checkpoint kept (None when there is none).

    Checkpoint N pairs with log N and replay goes on through N+1, ..., so the logs from
    the oldest kept checkpoint on are exactly what a replay from any kept one reads.
    """
    counted = [k for k in file_numbers(d, CHECKPOINT_PREFIX) if k not in ignore]
    if not counted:
        return None
    oldest = counted[-max(1, keep):][0]
    for prefix in prefixes:
        for k in file_numbers(d, prefix):
            if k < oldest:
                (d / f"{prefix}{k}").unlink(missing_ok=True)
    fsync_dir(d)
    return oldest


def checkpoint_temps(d: Path, first: int = 1, through: int | None = None) -> list[Path]:
    """The temporary files of checkpoints ``first`` (through ``through``) in ``d``: what
    a writer killed while writing one left (``durable.replace_durably``)."""
    out = []
    for name in _names(d):
        m = _CHECKPOINT_TEMP.fullmatch(name)
        if m is not None and first <= int(m[1]) and (through is None or int(m[1]) <= through):
            out.append(d / name)
    return sorted(out)


def remove_checkpoint_temps(d: Path, first: int = 1,
                            through: int | None = None) -> list[tuple[str, int]]:
    """Remove what a process killed while writing checkpoint N (``first`` <= N, and N <=
    ``through`` if given) left in ``d``: its temporary file ``.serverchkpt<N>.<hex>.tmp``
    (``durable.replace_durably``), which nothing else ever removes. Returns the name and
    size of each file removed.

    Call only where no live process can be writing such a checkpoint: the caller holds
    the lock that makes it the only writer of those checkpoints in ``d``.
    """
    removed = []
    for p in checkpoint_temps(d, first, through):
        try:
            size = p.stat().st_size
            p.unlink()
        except FileNotFoundError:
            continue
        removed.append((p.name, size))
    return sorted(removed)


def remove_first_start_leftovers(d: Path) -> None:
    """Remove what a first start that died before its record 0 was durable left behind
    (see ``recovery.interrupted_first_start``).

    Raises:
        CoordinatorError: ``d`` holds a checkpoint after 1: a history, not leftovers.
    """
    later = [k for k in file_numbers(d, CHECKPOINT_PREFIX) if k != 1]
    if later:
        raise CoordinatorError(f"{d}: holds checkpoint {later[-1]}, so it is not the "
                               "leftovers of a first start; refusing to start afresh")
    for prefix in (LOG_PREFIX, DIGEST_PREFIX, SEAL_PREFIX):
        for k in file_numbers(d, prefix):
            (d / f"{prefix}{k}").unlink()
    # Checkpoint 1 goes last: while it exists the leftovers are recognised as such (a
    # log without any checkpoint is refused, never overwritten).
    for tmp in d.glob(f".{CHECKPOINT_PREFIX}1.*tmp"):
        tmp.unlink(missing_ok=True)
    (d / f"{CHECKPOINT_PREFIX}1").unlink(missing_ok=True)
    fsync_dir(d)


def remove_uncommitted_version(d: Path) -> None:
    """Remove the logs, seals and checkpoints (with their temporary files) that upgrades
    to ``d``'s version left when they were killed before the registration named it:
    nothing there counts yet (a replica set's live upgrade clears them as it begins)."""
    for prefix in (LOG_PREFIX, SEAL_PREFIX, CHECKPOINT_PREFIX):
        for k in file_numbers(d, prefix):
            (d / f"{prefix}{k}").unlink(missing_ok=True)
    for tmp in checkpoint_temps(d):
        tmp.unlink(missing_ok=True)
    fsync_dir(d)


def seal_path(d: Path, n: int) -> Path:
    return d / f"{SEAL_PREFIX}{n}"
