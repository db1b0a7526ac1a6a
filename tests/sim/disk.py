"""The simulated disk of ``world``: each instance's log directory, a real directory
whose logs and checkpoints are written as the coordinator writes them, with what is
synced of each log (and of the directory's entries) tracked so that a crash loses the
rest; the faults done to its files (a flipped bit, a file lost) and their repair; the
real standalone sink writing into it; and the shared epochs of an active/active
instance's replicas.

Pruning is the real sink's ``remove_unkept`` (``logstore.remove_unkept``'s rule) run
on the real directory; the disk learns what it removed by looking at the directory
before and after (``SimDisk.prune``). A removal is a change to the directory's entries,
durable only once the directory is synced, which the real function does once, after its
last removal: a crash before that sync brings back the removals not yet on disk (those
after a fraction of them, in the order the function removes them: each kind in turn,
logs first, oldest first), as a crash takes back a created entry that was not synced.
What the replay checks start from is what pruning kept: the oldest checkpoint that has
every log from it on (``replay_from``)."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from ambrosia_ic import recovery
from ambrosia_ic.coordinator.sink import StandaloneSink
from ambrosia_ic.errors import LockLostError
from ambrosia_ic.logstore import (
    CHECKPOINT_PREFIX,
    DIGEST_PREFIX,
    LOG_PREFIX,
    SEAL_PREFIX,
    checkpoint_path,
    log_path,
    write_checkpoint,
)
from ambrosia_ic.logstore.watermarks import decode_watermarks

from ambrosia_core.wire import HEADER_SIZE
from ambrosia_core.wire.records import HEADER

from .app import Rounds

if TYPE_CHECKING:
    from .world import Node

__all__ = ["DiskEntry", "SavedCheckpoint", "SimDisk", "SimEpochs", "SimLog", "SimSink"]

def _numbers(names: list[str], prefix: str) -> list[int]:
    """The N of every ``<prefix><N>`` of ``names``, ascending (``file_numbers``' rule)."""
    cut = len(prefix)
    return sorted(int(name[cut:]) for name in names
                  if name.startswith(prefix) and name[cut:].isdigit())


def _removal_order(name: str) -> tuple[int, int]:
    """Where ``remove_unkept`` removes the file ``name``: logs, then checkpoints, then
    the rest (digests, seals), each oldest first."""
    kind = 0 if name.startswith(LOG_PREFIX) else 1 if name.startswith(CHECKPOINT_PREFIX) else 2
    return kind, int("".join(ch for ch in name if ch.isdigit()) or 0)


_PRUNABLE = (LOG_PREFIX, CHECKPOINT_PREFIX, DIGEST_PREFIX, SEAL_PREFIX)


def _append(path: Path, data: bytes) -> None:
    """``data`` added at the end of the file at ``path`` (made if it is gone), as
    ``open(path, "ab")`` would, without a Python file object."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


class SimLog:
    """One log file: what was written, and how much of it is synced (the sink's
    ``LogWriter`` surface). The bytes are also written to the real file at ``path``,
    which is what a recovery reads. A crash keeps the synced bytes, and in the file a
    prefix of a write in progress (``tear``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = bytearray()
        self.synced = 0
        self._parsed: list[DiskEntry] = []
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))  # empty

    @property
    def size(self) -> int:
        return len(self.data)

    def write(self, data: bytes) -> None:
        self.data += data
        _append(self.path, data)

    def sync(self) -> None:
        self.synced = len(self.data)

    def trim(self) -> None:
        pass

    def close(self) -> None:
        pass

    def crash(self) -> None:
        del self.data[self.synced:]
        if self.path.exists():
            os.truncate(self.path, self.synced)

    def tear(self, data: bytes) -> None:
        """A write of ``data`` cut short by the crash: the file keeps its prefix."""
        _append(self.path, data)

    def records_end(self) -> int:
        """Where the last whole synced record ends."""
        recs = self.records()
        return recs[-1].end if recs else 0

    def records(self) -> list[DiskEntry]:
        """Each record in the synced bytes (parsed once: the bytes only grow, except
        at a crash, which cuts what was not synced)."""
        parsed = self._parsed
        pos = parsed[-1].end if parsed else 0
        if pos > self.synced:  # cut by a crash
            parsed.clear()
            pos = 0
        data = self.data
        while pos + HEADER_SIZE <= self.synced:
            cid, size, check, seq = HEADER.unpack_from(data, pos)
            length = -size - 1  # the disk form's length is negative
            end = pos + length
            wire = HEADER.pack(cid, length, check, seq) + bytes(data[pos + HEADER_SIZE:end])
            inputs, after, epoch = decode_watermarks(data, end, self.synced)
            parsed.append(DiskEntry(seq, wire, inputs, epoch, pos, after))
            pos = after
        return parsed


@attrs.frozen
class DiskEntry:
    seq: int
    wire: bytes
    inputs: dict[str, int]
    epoch: int
    offset: int
    end: int


@attrs.define
class SavedCheckpoint:
    next_seq: int
    inputs: dict[str, int]
    outputs: dict[str, Any]
    chunks: list[bytes]


class SimDisk:
    """An instance's log directory: numbered logs and checkpoints, and for the replicas
    of an active/active instance (who share it) the claimed epochs and the seals.

    The logs and checkpoints are also real files in ``dir``, written as the coordinator
    writes them; a standalone instance recovers from those. ``damage`` holds the
    faults done to them that are not undone yet: ``(file, offset, original bytes)``
    (None: the whole file was removed)."""

    def __init__(self, root: Path, name: str) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.logs: dict[int, SimLog] = {}
        self.checkpoints: dict[int, SavedCheckpoint] = {}
        self.epochs: dict[int, SimEpochs] = {}  # epoch -> the claim that holds it
        self.seals: dict[int, int] = {}  # log -> where it ends for good
        self.checkpointer: Node | None = None  # who holds the checkpointing secondary's lock
        self.unsynced: set[int] = set()  # logs created since the directory was synced
        self.app: type[Rounds] = Rounds  # the class its checkpoints hold
        self.damage: list[tuple[Path, int | None, bytes]] = []

    def open_log(self, n: int) -> SimLog:
        log = self.logs[n] = SimLog(log_path(self.dir, n))
        self.unsynced.add(n)
        return log

    def sync_dir(self) -> None:
        """``fsync_dir``: the entries created so far are durable."""
        self.unsynced.clear()

    def save_checkpoint(self, n: int, saved: SavedCheckpoint, message: bytes) -> None:
        """Checkpoint ``n``, and its file as the coordinator writes it."""
        self.checkpoints[n] = saved
        state = recovery.coordinator_state(saved.next_seq, saved.inputs, saved.outputs)
        write_checkpoint(self.dir, n, state, message, saved.chunks)

    def leave_temporary(self, n: int, data: bytes) -> None:
        """A crash while checkpoint ``n`` was written: its temporary file stays."""
        (self.dir / f".{CHECKPOINT_PREFIX}{n}.{n:08x}.tmp").write_bytes(data)

    def temporaries(self) -> list[str]:
        return sorted(name for name in os.listdir(self.dir) if name.endswith(".tmp"))

    def crash(self) -> list[int]:
        """Unsynced bytes are lost, and so is every log whose directory entry was not
        synced. Returns those logs of them that held synced bytes."""
        for log in self.logs.values():
            log.crash()
        lost = sorted(n for n in self.unsynced if self.logs[n].synced)
        for n in self.unsynced:
            self.logs.pop(n).path.unlink(missing_ok=True)
        self.unsynced.clear()
        return lost

    def first_start_pending(self) -> bool:
        """No record 0 is durable: the next start is a first start
        (``recovery.interrupted_first_start``: no checkpoint but 1, whose log holds no
        record; a checkpoint after 1 is a history, even once pruning left no record)."""
        return (not self.checkpoints.keys() - {1}
                and not any(log.synced for log in self.logs.values()))

    def newest_epoch(self) -> int:
        return max(self.epochs, default=0)

    def durable_records(self, from_seq: int, first_log: int = 0) -> list[DiskEntry]:
        """The log's records from ``from_seq`` on, in the logs from ``first_log`` on (in
        a sealed log, those before the seal: a fenced primary's writes after it are not
        the instance's)."""
        out = []
        for n in sorted(self.logs):
            if n < first_log:
                continue
            seal = self.seals.get(n)
            out += [r for r in self.logs[n].records()
                    if r.seq >= from_seq and (seal is None or r.end <= seal)]
        return out

    def replay_from(self) -> tuple[SavedCheckpoint, list[DiskEntry]] | None:
        """What a replay of what is kept reads: the oldest checkpoint that has every log
        from it on, and the durable records after it (None: no checkpoint has)."""
        logs = self.logs
        newest = max(logs, default=0)
        for n in sorted(self.checkpoints):
            if all(k in logs for k in range(n, newest + 1)):
                saved = self.checkpoints[n]
                return saved, self.durable_records(saved.next_seq, n)
        return None

    # -- pruning (the real sink's ``remove_unkept``)
    def prune(self, sink: Any, keep: int, damaged: Collection[int],
              cut: float | None = None) -> tuple[list[str], list[int], list[int]]:
        """``sink.remove_unkept`` on the directory; the disk learns what it removed.
        With ``cut``, a crash comes before its directory sync: of its removals, only
        that fraction (in the order it removes them) reached the disk, and the rest
        come back. Returns the names removed for good, and the intact checkpoints
        before and after (``intact_checkpoints``)."""
        names = os.listdir(self.dir)
        saved = {name: (self.dir / name).read_bytes() for name in names
                 if name.startswith(_PRUNABLE)} if cut is not None else {}
        sink.remove_unkept(self.dir, keep, damaged)
        after = os.listdir(self.dir)
        left = set(after)
        gone = sorted((name for name in names if name not in left), key=_removal_order)
        if cut is not None:
            done = round(len(gone) * cut)
            for name in gone[done:]:  # its removal never reached the disk
                (self.dir / name).write_bytes(saved[name])
            gone = gone[:done]
        for name in gone:
            if name.startswith(LOG_PREFIX):
                n = int(name[len(LOG_PREFIX):])
                self.logs.pop(n, None)
                self.seals.pop(n, None)  # its seal file goes with it (``FencedSink``'s)
                self.unsynced.discard(n)
            elif name.startswith(CHECKPOINT_PREFIX):
                self.checkpoints.pop(int(name[len(CHECKPOINT_PREFIX):]), None)
        return gone, self.intact_checkpoints(names), self.intact_checkpoints(after)

    def intact_checkpoints(self, names: list[str] | None = None) -> list[int]:
        """The checkpoints in the directory (or among ``names``) that are not damaged,
        ascending."""
        bad = {path.name for path, _, _ in self.damage}
        return [n for n in _numbers(os.listdir(self.dir) if names is None else names,
                                    CHECKPOINT_PREFIX)
                if f"{CHECKPOINT_PREFIX}{n}" not in bad]

    def missing_log(self, keep: int | None = None) -> tuple[int, int] | None:
        """A kept checkpoint and a log after it that is gone, if any: what a repro from
        that checkpoint would miss. Kept: the newest ``keep``, damaged or not (pruning
        keeps at least those; older ones may be what a crash while pruning left), or
        with None, every checkpoint there (what a pruning that finished left)."""
        names = os.listdir(self.dir)
        kept = _numbers(names, CHECKPOINT_PREFIX)[-keep if keep else 0:]
        logs = set(_numbers(names, LOG_PREFIX))
        if kept:
            for k in range(kept[0], max(logs, default=0) + 1):
                if k not in logs:
                    return kept[0], k
        return None

    def durable_end(self) -> int:
        """The sequence id after the last durable record (0: none)."""
        for n in sorted(self.logs, reverse=True):
            recs = self.logs[n].records()
            if recs:
                return recs[-1].seq + 1
        # An upgraded instance's new directory: its records begin after its checkpoint.
        return max((c.next_seq for c in self.checkpoints.values()), default=0)

    # -- damage, and its repair (as from a backup)
    def targets(self) -> list[Path]:
        """The files a recovery reads: the newest checkpoint and the logs from it on."""
        names = os.listdir(self.dir) if self.dir.is_dir() else []  # one look, not one a kind
        ckpts = _numbers(names, CHECKPOINT_PREFIX)
        if not ckpts:
            return []
        n = ckpts[-1]
        logs = [k for k in _numbers(names, LOG_PREFIX) if k >= n]
        return [checkpoint_path(self.dir, n)] + [log_path(self.dir, k) for k in logs
                                                 if self.logs.get(k) and self.logs[k].synced]

    def flip(self, path: Path, where: float, spot: tuple[int, int]) -> None:
        """Flip a bit of a durable record ``where`` (a fraction) in a log, at ``spot``
        (``_SPOTS``); of the byte ``where`` in a checkpoint."""
        data = bytearray(path.read_bytes())
        byte, bit = spot
        if path.name.startswith(LOG_PREFIX):
            recs = self.logs[int(path.name[len(LOG_PREFIX):])].records()
            rec = recs[min(len(recs) - 1, int(len(recs) * where))]
            at = (rec.offset if byte >= 0 else rec.end) + byte
        else:
            at = min(len(data) - 1, int(len(data) * where))
        self.damage.append((path, at, bytes(data[at : at + 1])))
        data[at] ^= 1 << bit
        path.write_bytes(bytes(data))

    def lose(self, path: Path) -> None:
        """A file lost (its directory entry never made it to disk, say)."""
        self.damage.append((path, None, path.read_bytes()))
        path.unlink()

    def repair(self, but: Collection[Path] = ()) -> None:
        """Undo the damage, but that to the files ``but`` (flipped bits stay there)."""
        left = []
        for path, at, data in reversed(self.damage):
            if path in but and at is not None:
                left.append((path, at, data))
            elif at is None:
                path.write_bytes(data)
            elif path.exists() and path.stat().st_size > at:
                with open(path, "r+b") as f:
                    f.seek(at)
                    f.write(data)
        self.damage[:] = reversed(left)

    def files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.dir.iterdir())}


class SimSink(StandaloneSink):
    """The real standalone sink, its logs ``SimLog``s of its node's disk, and its
    directory syncs recorded by that disk."""

    def __init__(self, node: Node) -> None:
        super().__init__(region=0)
        self.node = node

    def open_log(self, path: Path) -> Any:
        return self.node.disk.open_log(int(path.name[len(LOG_PREFIX):]))

    def sync_dir(self, d: Path) -> None:
        assert d == self.node.disk.dir
        self.node.disk.sync_dir()


class SimEpochs:
    """One replica's claims on the shared epochs (``lease.Epochs``' surface for the
    sink): claiming is a compare-and-swap, and a claim is fenced once a newer exists."""

    def __init__(self, disk: SimDisk) -> None:
        self.disk = disk
        self.held: int | None = None

    def current(self) -> int:
        return self.disk.newest_epoch()

    def claim(self, e: int) -> bool:
        if e in self.disk.epochs:
            return False
        self.disk.epochs[e] = self
        self.held = e
        return True

    def check(self) -> None:
        if self.held is not None and self.held + 1 in self.disk.epochs:
            raise LockLostError(f"epoch {self.held + 1} was claimed by another replica; "
                                f"this primary (epoch {self.held}) was fenced off")
