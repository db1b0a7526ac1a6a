"""Where the log goes: the one thing a standalone coordinator and an active/active
primary do differently when they write.

A standalone coordinator is the only writer of its directory (its flock says so): it
appends, fsyncs, and checkpoints each time it moves to a new log file. An active/active
primary shares the directory with replicas that may claim a newer epoch at any moment:
it checks before and after each write that nobody did (a claimed epoch means the seal
may already lie before this record), creates each log file exclusively, stamps its epoch
on every record, and leaves checkpoints to the checkpointing secondary.

Both write records into zeros written ahead (``LogWriter``'s region) unless
``$AMBROSIA_IC_PREALLOC`` is 0. A standalone coordinator cuts the zeros off a log before
it creates the next one (and when it stops), so only its newest log ends in zeros. An
active/active primary leaves them: its followers read the log through a map, which a
file cut shorter under it would fault; readers take a zero tail in any log for its end.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from ambrosia_core.durable import fsync_dir
from ambrosia_core.errors import CoordinatorError
from ambrosia_ic.errors import LockLostError

from ..lease import Epochs
from ..logstore import (
    CHECKPOINT_PREFIX,
    DEFAULT_REGION,
    DIGEST_PREFIX,
    LOG_PREFIX,
    SEAL_PREFIX,
    LogWriter,
    log_path,
    remove_unkept,
)

__all__ = ["FencedSink", "LogSink", "StandaloneSink", "log_region"]

PREALLOC_ENV = "AMBROSIA_IC_PREALLOC"


def log_region(environ: Mapping[str, str] = os.environ) -> int:
    """The bytes of zeros a log writer keeps ahead (``LogWriter``), from
    ``$AMBROSIA_IC_PREALLOC``: unset or 1, the default; 0, none (records are appended:
    for A/B measurements, or a file system where overwriting does not pay); N > 1, N KiB.

    Raises:
        CoordinatorError: the variable is not a whole number.
    """
    raw = environ.get(PREALLOC_ENV, "").strip()
    if not raw:
        return DEFAULT_REGION
    try:
        kib = int(raw)
    except ValueError:
        raise CoordinatorError(f"${PREALLOC_ENV}={raw!r}: expected 0 (off), 1 (on) or a "
                               "region in KiB") from None
    if kib < 0:
        raise CoordinatorError(f"${PREALLOC_ENV}={raw!r}: a region cannot be negative")
    return DEFAULT_REGION if kib == 1 else kib * 1024


class LogSink(Protocol):
    """How a coordinator writes its log (see the module docstring)."""

    #: Standalone only: replicas share the directory, so none of them owns the digests.
    writes_digests: bool
    #: Whether moving to the next log asks the binding for a checkpoint right away.
    checkpoints_on_switch: bool
    #: Whether Impulses the binding sends before the coordinator is live are kept. A
    #: replica's binding replays a log another replica wrote: an Impulse from it then is
    #: a stray, not an input.
    keeps_early_impulses: bool
    #: Where a record's write and fsync run unless the coordinator is told (see ``commit``).
    fsync_in_thread: bool

    @property
    def epoch(self) -> int | None:
        """The epoch stamped on each record written (None: none is stamped)."""

    def write(self, writer: LogWriter, data: bytes) -> None:
        """Append ``data`` durably (blocking: call it off the event loop)."""

    def open_log(self, path: Path) -> LogWriter:
        """A writer of a new log file at ``path`` (a first start's or a recovery's)."""

    def next_log(self, d: Path, n: int, old: LogWriter | None = None) -> LogWriter:
        """Open log ``n`` of ``d`` to move on to it from ``old``'s log (blocking)."""

    def remove_unkept(self, d: Path, keep: int, damaged: Collection[int]) -> None:
        """Once a new checkpoint is durable: remove what no kept checkpoint needs."""


class StandaloneSink:
    """The only writer of its directory."""

    writes_digests = True
    checkpoints_on_switch = True
    keeps_early_impulses = True
    fsync_in_thread = False
    # How a directory's entries are made durable (a simulated disk records it instead).
    sync_dir = staticmethod(fsync_dir)

    def __init__(self, region: int | None = None) -> None:
        self.region = log_region() if region is None else region

    @property
    def epoch(self) -> int | None:
        return None

    def write(self, writer: LogWriter, data: bytes) -> None:
        writer.write(data)
        writer.sync()

    def open_log(self, path: Path) -> LogWriter:
        return LogWriter(path, region=self.region)

    def next_log(self, d: Path, n: int, old: LogWriter | None = None) -> LogWriter:
        if old is not None:
            # Before log n exists: a crash after this leaves no older log with zeros.
            old.trim()
        writer = self.open_log(log_path(d, n))
        # Before a record is written to it, and before checkpoint n is written: no
        # durable record and no checkpoint outlives the log's entry.
        self.sync_dir(d)
        return writer

    def remove_unkept(self, d: Path, keep: int, damaged: Collection[int]) -> None:
        # The last K checkpoints with their logs and digests: what a repro from any needs.
        remove_unkept(d, keep, (LOG_PREFIX, CHECKPOINT_PREFIX, DIGEST_PREFIX), damaged)


class FencedSink:
    """An active/active replica's writer, fenced by the epochs of ``epochs``' directory.

    ``epochs`` is replaced when a live upgrade moves the replica to the new version's
    directory.
    """

    writes_digests = False
    checkpoints_on_switch = False
    keeps_early_impulses = False
    # A primary's heartbeat must keep beating while a slow fsync runs: standbys take a
    # silence of LEASE for a dead primary.
    fsync_in_thread = True

    def __init__(self, epochs: Epochs, region: int | None = None) -> None:
        self.epochs = epochs
        self.region = log_region() if region is None else region

    @property
    def epoch(self) -> int | None:
        return self.epochs.held

    def write(self, writer: LogWriter, data: bytes) -> None:
        for _ in self.write_steps(writer, data):
            pass

    def write_steps(self, writer: LogWriter, data: bytes) -> Iterator[str]:
        """``write`` as its steps, each ended by a yield (the simulation lets other
        replicas act between them): look for a newer epoch; write and sync; look again.
        A claim between the first look and the write lands the record after it (past
        the seal to come): the second look stops this primary before it delivers it.

        Raises:
            LockLostError: a newer epoch was claimed.
        """
        self.epochs.check()
        yield "checked"
        writer.write(data)
        writer.sync()
        yield "landed"
        # Claimed meanwhile? Then this record may lie past the seal: say nothing.
        self.epochs.check()

    def open_log(self, path: Path, exclusive: bool = False) -> LogWriter:
        # Never trimmed: followers may be reading it through a map (see the module).
        return LogWriter(path, exclusive=exclusive, region=self.region, trim_on_close=False)

    def next_log(self, d: Path, n: int, old: LogWriter | None = None) -> LogWriter:
        """Raises LockLostError if another replica claimed a newer epoch or created the
        log first. ``old``'s zeros stay: its log ends at its last whole record, or at
        its seal."""
        self.epochs.check()
        try:
            writer = self.open_log(log_path(d, n), exclusive=True)
        except FileExistsError:
            raise LockLostError(f"{log_path(d, n)} was created by another primary") from None
        fsync_dir(d)
        return writer

    def remove_unkept(self, d: Path, keep: int, damaged: Collection[int]) -> None:
        # With their seals, and at least the previous checkpoint: a standby just
        # starting may be reading it.
        remove_unkept(d, max(2, keep), (LOG_PREFIX, CHECKPOINT_PREFIX, SEAL_PREFIX), damaged)
