"""A follower's position in a log its replicas share (``shared_dir``), and which records
read there are committed (see that module's docstring for the rule)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ambrosia_ic.errors import LogCorruptionError, MissingLogError

from ..logstore import LOG_PREFIX, DiskRecord, LogScan, file_numbers, log_path, read_seal

__all__ = ["LogTail", "committed_prefix"]


class _Stamped(Protocol):
    @property
    def epoch(self) -> int: ...


Stamped = TypeVar("Stamped", bound=_Stamped)


def committed_prefix(recs: Sequence[Stamped], newest_epoch: int) -> list[Stamped]:
    """Of records read from the newest log (no seal, no newer log), those a follower may
    deliver: the leading ones whose epoch is still ``newest_epoch`` read after them. A
    takeover claims its epoch first and seals after, so such a record was written
    before the claim and lies inside any later seal; one of an older epoch may lie past
    the seal to come (a fenced primary's) and waits for it."""
    keep = 0
    while keep < len(recs) and recs[keep].epoch >= newest_epoch:
        keep += 1
    return list(recs[:keep])


class LogTail:
    """A follower's position in the shared log: log ``n`` at byte ``offset``."""

    def __init__(self, d: Path, cid: int, n: int, next_seq: int) -> None:
        self.dir = d
        self.cid = cid
        self.n = n
        self.offset = 0
        self.next_seq = next_seq

    def poll(self, newest_epoch: Any) -> tuple[list[DiskRecord], bool]:
        """Committed records of log ``n`` past the position, and whether log ``n`` is
        complete and wholly read (the caller then calls ``next_log``).

        Raises:
            MissingLogError: log ``n`` is gone and a later one exists: pruned while this
                follower still had it to read (it fell further behind than the kept
                checkpoints reach). It would otherwise find nothing there for ever, and a
                takeover of its would never end while its heartbeat held the epoch.
        """
        # Order matters: a takeover writes the seal before creating the next log.
        has_next = log_path(self.dir, self.n + 1).exists()
        seal = read_seal(self.dir, self.n)
        path = log_path(self.dir, self.n)
        if not path.exists():
            if file_numbers(self.dir, LOG_PREFIX)[-1:] > [self.n]:
                raise MissingLogError(str(path), "removed while this replica still had it to "
                                      "read (pruned: it fell further behind than the kept "
                                      "checkpoints reach); start it again to follow from "
                                      "the newest checkpoint")
            return [], False
        scan = LogScan(path, allow_torn_tail=True, first_seq=self.next_seq,
                       committer_id=self.cid, start=self.offset, limit=seal)
        recs = list(scan)
        if seal is None and not has_next:
            recs = committed_prefix(recs, newest_epoch())
        elif seal is None and scan.torn_at is not None and not scan.zero_tail:
            raise LogCorruptionError(str(path), scan.torn_at,
                                     "an incomplete record in a log that was moved past")
        if recs:
            self.offset = recs[-1].end
            self.next_seq = recs[-1].seq_id + 1
        # A log moved past may end in zeros: its primary writes ahead and never cuts them.
        whole = scan.torn_at is None or scan.zero_tail
        done = (seal is not None and self.offset >= seal) or (
            seal is None and has_next and whole and self.offset == scan.good_end)
        return recs, done

    def next_log(self) -> None:
        self.n += 1
        self.offset = 0
