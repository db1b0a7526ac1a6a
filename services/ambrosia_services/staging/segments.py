"""Staged segments: the bytes of received messages, on disk, so that an immortal logs and
keeps only references to them.

A segment is an append-only file of blocks under a staging root. One block holds one run
of messages of one stream, in id order, with the check bytes that make a damaged or torn
block detectable. All integers are little-endian::

    segment  = MAGIC (8 bytes: b"AMBSEG1\\n") block*
    block    = header offsets data [messages] check
    header   = magic count:u32 stream_id:u64 first_id:u64 last_id:u64 data_len:u64
               magic b"BLK1": a block without the messages part; b"BLK2": with it
    offsets  = (count + 1) x u32   where message i is data[offsets[i]:offsets[i+1]],
                                   offsets[0] = 0 and offsets[count] = data_len
    data     = the payloads, one after the other
    messages = ids key_offsets keys   (each message's id and key, for readers that hand
                                   out messages rather than bytes: KCL record processors)
    ids      = count x u64         rising; ids[0] = first_id, ids[count - 1] = last_id
    key_offsets = (count + 1) x u32  key i is keys[key_offsets[i]:key_offsets[i+1]]
    keys     = the keys, one after the other
    check    = XXH64 (seed 0) of everything before it: u64

The connector coordinator writes BLK2 blocks; readers of the bytes alone (Spark, the
sinks) take ``data`` from either kind.

A ``Ref`` names one block (segment name, offset, length, check) with what the immortal
decides with (stream, first and last message id, count, payload bytes, lines); it is plain
data,
so it can be logged and checkpointed. ``SegmentWriter`` appends blocks and makes them
durable (``sync``: fsync of the file, and of the directory when a file was created) before
any reference to them is sent on; ``read_block`` (and ``read_payloads``) read one back,
checking that it is the block the reference names, whole and undamaged.

Segment names are ``<life>-<n>.seg``: ``life`` is unique per writer (a coordinator uses
``<instance>.<random>``), so a new primary never appends to a file an earlier life was
writing, and instances sharing a root tell their segments apart. The layout of blocks (offsets
before data) lets a reader build an Arrow binary array over a block without copying.
``services/ambrosia_services/jobs/spark/java`` reads the same format in the JVM: a change here
changes it.
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs
import xxhash

from ambrosia_core.durable import fsync_dir, make_dirs
from ambrosia_core.errors import AmbrosiaError

__all__ = [
    "BLOCK_MAGIC",
    "CHECK",
    "HEADER",
    "MAGIC",
    "Block",
    "Ref",
    "SegmentDamagedError",
    "SegmentMissingError",
    "SegmentWriter",
    "StagingError",
    "StagingFullError",
    "count_lines",
    "encode_block",
]

MAGIC: Final = b"AMBSEG1\n"
BLOCK_MAGIC: Final = b"BLK1"
BLOCK_MAGIC_MESSAGES: Final = b"BLK2"  # with each message's id and key
HEADER: Final = struct.Struct("<4sIQQQQ")  # magic, count, stream, first, last, data_len
CHECK: Final = struct.Struct("<Q")  # a block's xxh64, after its bytes
MAX_BLOCK_DATA: Final = (1 << 32) - 1  # offsets are u32
SUFFIX: Final = ".seg"


class StagingError(AmbrosiaError):
    """A staged segment cannot be written or read."""


class StagingFullError(StagingError, OSError):
    """The staging root has no room (ENOSPC or EDQUOT): nothing of the write counts."""

    def __str__(self) -> str:
        return str(self.strerror)


class SegmentMissingError(StagingError):
    """A referenced segment is not there (deleted, or a root that is not the writer's)."""


class SegmentDamagedError(StagingError):
    """A referenced block is not what its reference says: cut short, or its bytes or check
    bytes differ."""


@attrs.frozen
class Ref:
    """One staged block, as logged: where it is and what it holds."""

    stream_id: int
    first_id: int
    last_id: int
    count: int  # messages
    size: int  # payload bytes (data_len)
    segment: str  # the segment's file name, relative to the staging root
    offset: int  # of the block in the segment
    length: int  # of the whole block
    check: int  # the block's XXH64
    lines: int = 0  # line ends ("\n") in its payloads, and a last line without one each

    def to_list(self) -> list[int | str]:
        return [self.stream_id, self.first_id, self.last_id, self.count, self.size,
                self.segment, self.offset, self.length, self.check, self.lines]

    @classmethod
    def from_list(cls, fields: Sequence[int | str]) -> Ref:
        s, f, la, c, z, seg, off, n, chk, *rest = fields
        return cls(int(s), int(f), int(la), int(c), int(z), str(seg), int(off), int(n),
                   int(chk), int(rest[0]) if rest else 0)


@attrs.frozen
class Block:
    """A block read back: ``data[offsets[i]:offsets[i+1]]`` is message i."""

    ref: Ref
    offsets: memoryview  # (count + 1) u32, little-endian, as bytes
    data: memoryview
    ids: memoryview | None = None  # count u64 (BLK2), else None
    key_offsets: memoryview | None = None  # (count + 1) u32 (BLK2)
    keys: memoryview | None = None

    def payloads(self) -> list[bytes]:
        ends = self.offsets.cast("I")
        return [bytes(self.data[ends[i]:ends[i + 1]]) for i in range(len(ends) - 1)]

    def messages(self) -> list[tuple[int, bytes, bytes]]:
        """Each message as (id, key, payload), in order.

        Raises:
            ValueError: a BLK1 block, which holds no ids or keys.
        """
        if self.ids is None or self.key_offsets is None or self.keys is None:
            raise ValueError(f"the block at {self.ref.offset} of {self.ref.segment} holds "
                             "no message ids (written without them)")
        ids = self.ids.cast("Q")
        kends = self.key_offsets.cast("I")
        return [(ids[i], bytes(self.keys[kends[i]:kends[i + 1]]), payload)
                for i, payload in enumerate(self.payloads())]


def count_lines(payloads: Sequence[bytes]) -> int:
    """The lines of ``payloads``: each ``\n``, and each payload's last line without one."""
    return (sum(p.count(b"\n") for p in payloads)
            + sum(1 for p in payloads if p and not p.endswith(b"\n")))


def encode_block(stream_id: int, first_id: int, last_id: int, payloads: Sequence[bytes],
                 ids: Sequence[int] | None = None,
                 keys: Sequence[bytes] | None = None) -> tuple[bytes, int, int]:
    """The bytes of one block, its check and its payload size: BLK2 with ``ids`` (and
    ``keys``, empty if not given), else BLK1.

    Raises:
        ValueError: no payloads, ids out of order or not one per payload, or more data
            than u32 offsets reach.
    """
    if not payloads:
        raise ValueError("a block holds at least one message")
    if first_id > last_id:
        raise ValueError(f"first id {first_id} is after last id {last_id}")
    offsets = [0, *itertools.accumulate(map(len, payloads))]
    size = offsets[-1]
    if size > MAX_BLOCK_DATA:
        raise ValueError(f"a block holds at most {MAX_BLOCK_DATA} payload bytes, not {size}")
    parts = [b"", struct.pack(f"<{len(offsets)}I", *offsets), *payloads]
    magic = BLOCK_MAGIC
    if ids is not None:
        keys = [b""] * len(payloads) if keys is None else keys
        if len(ids) != len(payloads) or len(keys) != len(payloads):
            raise ValueError(f"{len(payloads)} payloads need as many ids and keys, not "
                             f"{len(ids)} and {len(keys)}")
        if ids[0] != first_id or ids[-1] != last_id or any(
                a >= b for a, b in itertools.pairwise(ids)):
            raise ValueError(f"message ids must rise from {first_id} to {last_id}")
        key_offsets = [0, *itertools.accumulate(map(len, keys))]
        if key_offsets[-1] > MAX_BLOCK_DATA:
            raise ValueError(f"a block holds at most {MAX_BLOCK_DATA} key bytes")
        parts += [struct.pack(f"<{len(ids)}Q", *ids),
                  struct.pack(f"<{len(key_offsets)}I", *key_offsets), *keys]
        magic = BLOCK_MAGIC_MESSAGES
    parts[0] = HEADER.pack(magic, len(payloads), stream_id, first_id, last_id, size)
    body = b"".join(parts)
    check = xxhash.xxh64_intdigest(body)
    return body + CHECK.pack(check), check, size


def _full(err: OSError) -> bool:
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


class SegmentWriter:
    """Appends blocks to this life's segments under ``root``; one writer per root at a
    time (the primary's). Not thread-safe: one caller appends and syncs in turn.

    Args:
        root: the staging root (created if missing).
        life: this writer's part of segment names (random per primary life).
        segment_bytes: a segment is closed once it is this long; the next block starts
            the next one (a block larger than this gets a segment of its own).
    """

    def __init__(self, root: str | os.PathLike[str], life: str,
                 segment_bytes: int = 64 << 20) -> None:
        self.root = Path(root)
        self.life = life
        self.segment_bytes = segment_bytes
        self._n = 0
        self._file: int | None = None  # the open segment's descriptor
        self._name = ""
        self._size = 0
        self._unsynced = False
        self._new_file = False
        self.written: list[str] = []  # every segment this writer created, oldest first

    @property
    def current(self) -> str:
        """The segment being appended to ('' before the first block)."""
        return self._name

    def append(self, stream_id: int, first_id: int, last_id: int,
               payloads: Sequence[bytes], ids: Sequence[int] | None = None,
               keys: Sequence[bytes] | None = None) -> Ref:
        """Write one block (not yet durable: ``sync`` makes it so); with ``ids`` (and
        ``keys``) a BLK2 block that holds them (see ``encode_block``).

        Raises:
            StagingFullError: the root is full; the segment is closed (its tail may hold
                part of this block, which nothing references) and the next block starts a
                new one.
            OSError: another failure of the file system, the same way.
        """
        block, check, size = encode_block(stream_id, first_id, last_id, payloads, ids, keys)
        if self._file is None or self._size >= self.segment_bytes:
            self._open_next()
        assert self._file is not None
        offset = self._size
        try:
            view = memoryview(block)
            while view:
                n = os.write(self._file, view)
                view = view[n:]
        except OSError as err:
            self._close()
            if _full(err):
                raise StagingFullError(err.errno, f"the staging root {self.root} is full "
                                       f"({err.strerror})") from None
            raise
        self._size += len(block)
        self._unsynced = True
        return Ref(stream_id, first_id, last_id, len(payloads), size, self._name, offset,
                   len(block), check, count_lines(payloads))

    def sync(self) -> None:
        """Make every block appended so far durable (the file, and the directory entry of
        a file created since the last sync).

        Raises:
            StagingFullError, OSError: as ``append`` (nothing since the last sync counts).
        """
        if self._file is None or not self._unsynced:
            return
        try:
            os.fsync(self._file)
            if self._new_file:
                fsync_dir(self.root)
                self._new_file = False
        except OSError as err:
            self._close()
            if _full(err):
                raise StagingFullError(err.errno, f"the staging root {self.root} is full "
                                       f"({err.strerror})") from None
            raise
        self._unsynced = False

    def close(self) -> None:
        self._close()

    def _open_next(self) -> None:
        # Blocks appended to the segment being closed are synced now: ``sync`` only
        # reaches the current file, and a power cut would otherwise take back blocks an
        # Impulse is about to name.
        self.sync()
        self._close()
        make_dirs(self.root)  # the root's own entry too: a power cut must not drop it
        self._n += 1
        # Named (and listed as written) before it exists: whoever lists the root and then
        # looks at ``current`` or ``written`` never takes it for another life's file.
        self._name = f"{self.life}-{self._n}{SUFFIX}"
        self.written.append(self._name)
        fd = os.open(self.root / self._name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, MAGIC)
        except OSError as err:
            os.close(fd)
            if _full(err):
                raise StagingFullError(err.errno, f"the staging root {self.root} is full "
                                       f"({err.strerror})") from None
            raise
        self._file = fd
        self._size = len(MAGIC)
        self._new_file = True

    def _close(self) -> None:
        if self._file is not None:
            fd, self._file = self._file, None
            os.close(fd)
            self._name = ""  # a failed file takes no more blocks
