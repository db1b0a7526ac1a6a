"""Checkpoint files: writing one durably with its check bytes, and reading one back only
after the check bytes of the whole file are verified."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack
import xxhash

from ambrosia_core.durable import replace_durably
from ambrosia_core.errors import CoordinatorError, WireFormatError
from ambrosia_core.wire import Incomplete, MessageType, decode_zz32, decode_zz64
from ambrosia_ic.errors import LogCorruptionError

from .layout import checkpoint_path

__all__ = ["CHECKPOINT_MAGIC", "CheckpointFile", "write_checkpoint"]

CHECKPOINT_MAGIC = b"AMBRCKP2"
UNCHECKED_CHECKPOINT_MAGIC = b"AMBRCKP1"  # the format before the check bytes
_TRAILER = struct.Struct("<Q")
_I32 = struct.Struct("<i")


def write_checkpoint(d: Path, n: int, state: Mapping[str, Any], message: bytes,
                     chunks: Iterator[bytes] | list[bytes]) -> Path:
    """Write ``serverchkpt<n>`` with its check bytes, durably (temporary file, fsync,
    rename, fsync the directory)."""
    path = checkpoint_path(d, n)
    replace_durably(path, _checkpoint_pieces(state, message, chunks))
    return path


def _checkpoint_pieces(state: Mapping[str, Any], message: bytes,
                       chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The pieces of a checkpoint file in order, the check bytes computed as they pass."""
    packed = msgpack.packb(dict(state), use_bin_type=True)
    digest = xxhash.xxh64()
    head = CHECKPOINT_MAGIC + _I32.pack(len(packed)) + packed + message
    digest.update(head)
    yield head
    for c in chunks:
        digest.update(c)
        yield c
    yield _TRAILER.pack(digest.intdigest())


def _verify_checkpoint(path: Path, f: Any, total: int) -> None:
    """Check the magic and the check bytes of the whole file, before anything in it is
    trusted: a flipped byte anywhere (state, message, raw bytes, the check bytes
    themselves) is reported here, in one line naming the file."""
    magic = f.read(8)
    if magic == UNCHECKED_CHECKPOINT_MAGIC:
        raise CoordinatorError(
            f"{path}: a checkpoint in the format before check bytes ({magic.decode()}), "
            "which this version does not read; start the instance afresh in a new log "
            "directory"
        )
    if magic != CHECKPOINT_MAGIC:
        raise LogCorruptionError(str(path), 0, "not a checkpoint file (bad magic)")
    body = total - _TRAILER.size
    if body < 12:
        raise LogCorruptionError(str(path), 0, f"a checkpoint file of {total} bytes is too short")
    digest = xxhash.xxh64(magic)
    left = body - len(magic)
    while left:
        data = f.read(min(1 << 20, left))
        if not data:
            raise LogCorruptionError(str(path), body - left, "the file shrank while read")
        digest.update(data)
        left -= len(data)
    (stored,) = _TRAILER.unpack(f.read(_TRAILER.size))
    if digest.intdigest() != stored:
        raise LogCorruptionError(str(path), body,
                                 "check bytes do not match the checkpoint's content")


class CheckpointFile:
    """A checkpoint file opened for reading, its check bytes verified: ``state``, the
    binding's ``message`` bytes, and ``size`` raw bytes at ``raw_offset`` (``chunks()``
    streams them).

    Raises:
        LogCorruptionError: the file is damaged (one line naming it).
        CoordinatorError: the file is in the format before check bytes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with open(path, "rb") as f:
                total = os.fstat(f.fileno()).st_size
                _verify_checkpoint(path, f, total)
                f.seek(8)
                (n,) = _I32.unpack(f.read(4))
                body = total - _TRAILER.size
                if n < 0 or 12 + n > body:
                    raise LogCorruptionError(str(path), 8, f"state length {n} overruns the file")
                packed = f.read(n)
                msg = f.read(16)
        except OSError as err:
            raise LogCorruptionError(str(path), 0, f"cannot read: {err.strerror}") from None
        try:
            state = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        except Exception as err:  # msgpack raises several unrelated types
            raise LogCorruptionError(
                str(path), 12, f"coordinator state does not parse: {err}"
            ) from None
        if not isinstance(state, dict):
            raise LogCorruptionError(str(path), 12, "coordinator state is not a map")
        self.state: dict[str, Any] = state
        pos = 12 + n
        try:
            mlen, p = decode_zz32(msg, 0)
            if mlen < 2 or msg[p] != MessageType.CHECKPOINT:
                raise WireFormatError("not a Checkpoint message")
            size, end = decode_zz64(msg, p + 1)
            if end != p + mlen or size < 0:
                raise WireFormatError("malformed Checkpoint message")
        except (Incomplete, WireFormatError, IndexError) as err:
            raise LogCorruptionError(
                str(path), pos, f"the binding's Checkpoint message does not parse: {err}"
            ) from None
        self.message = msg[:end]
        self.size = size
        self.raw_offset = pos + end
        if self.raw_offset + size != body:
            raise LogCorruptionError(
                str(path), self.raw_offset,
                f"{body - self.raw_offset} raw bytes where the checkpoint announces {size}",
            )

    def chunks(self, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        with open(self.path, "rb") as f:
            f.seek(self.raw_offset)
            left = self.size
            while left:
                data = f.read(min(chunk_size, left))
                if not data:
                    raise LogCorruptionError(str(self.path), f.tell(), "checkpoint cut short")
                left -= len(data)
                yield data
