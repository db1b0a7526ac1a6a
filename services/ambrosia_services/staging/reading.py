"""Reading staged segments back: a block by its reference, checked to be that block, whole
(``read_block``, ``read_payloads``), and the segments a root holds (``segment_names``).
The format is ``segments``'s.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import xxhash

from .segments import (
    BLOCK_MAGIC,
    BLOCK_MAGIC_MESSAGES,
    CHECK,
    HEADER,
    SUFFIX,
    Block,
    Ref,
    SegmentDamagedError,
    SegmentMissingError,
)

__all__ = ["read_block", "read_payloads", "segment_names"]


def read_block(root: str | os.PathLike[str], ref: Ref) -> Block:
    """Read the block ``ref`` names and check it is that block, whole.

    Raises:
        SegmentMissingError: the segment is not there.
        SegmentDamagedError: the block is cut short, or is not the one named, or its
            check bytes differ (the message names the segment and the offset).
    """
    path = Path(root) / ref.segment
    try:
        with open(path, "rb") as f:
            f.seek(ref.offset)
            raw = f.read(ref.length)
    except FileNotFoundError:
        raise SegmentMissingError(f"staged segment {path} is missing (its block at "
                                  f"{ref.offset} holds stream {ref.stream_id}'s messages "
                                  f"{ref.first_id}..{ref.last_id})") from None
    where = f"staged segment {path}, block at {ref.offset}"
    if len(raw) != ref.length:
        raise SegmentDamagedError(f"{where}: cut short ({len(raw)} of {ref.length} bytes)")
    if len(raw) < HEADER.size + 4 + CHECK.size:
        raise SegmentDamagedError(f"{where}: its lengths do not add up")
    view = memoryview(raw)
    check = xxhash.xxh64_intdigest(view[:-CHECK.size])
    if check != ref.check or CHECK.unpack_from(view, len(view) - CHECK.size)[0] != check:
        raise SegmentDamagedError(f"{where}: damaged (its check bytes differ)")
    magic, count, stream, first, last, size = HEADER.unpack_from(view)
    if magic not in (BLOCK_MAGIC, BLOCK_MAGIC_MESSAGES) or (count, stream, first, last, size) != (
            ref.count, ref.stream_id, ref.first_id, ref.last_id, ref.size):
        raise SegmentDamagedError(f"{where}: holds another block than the reference names")
    start = HEADER.size
    data = start + 4 * (count + 1)
    end = data + size  # of the data
    tail = len(view) - CHECK.size
    messages: tuple[memoryview, memoryview, memoryview] | None = None
    if end > tail:
        raise SegmentDamagedError(f"{where}: its lengths do not add up")
    if magic == BLOCK_MAGIC_MESSAGES:
        kstart = end + 8 * count
        kdata = kstart + 4 * (count + 1)
        if kdata > tail:
            raise SegmentDamagedError(f"{where}: its lengths do not add up")
        kends = view[kstart:kdata].cast("I")
        ids = view[end:kstart].cast("Q")
        if (kdata + kends[-1] != tail or kends[0] != 0
                or any(a > b for a, b in itertools.pairwise(kends))):
            raise SegmentDamagedError(f"{where}: its lengths do not add up")
        if ids[0] != first or ids[-1] != last or any(
                a >= b for a, b in itertools.pairwise(ids)):
            raise SegmentDamagedError(f"{where}: its message ids are out of order")
        messages = (view[end:kstart], view[kstart:kdata], view[kdata:tail])
    elif end != tail:
        raise SegmentDamagedError(f"{where}: its lengths do not add up")
    ends = view[start:data].cast("I")
    if ends[0] != 0 or ends[-1] != size or any(a > b for a, b in itertools.pairwise(ends)):
        raise SegmentDamagedError(f"{where}: its record offsets are out of order")
    if messages is None:
        return Block(ref, view[start:data], view[data:end])
    return Block(ref, view[start:data], view[data:end], *messages)


def read_payloads(root: str | os.PathLike[str], refs: Iterable[Ref]) -> list[bytes]:
    """Every message of ``refs``, in order (see ``read_block``)."""
    out: list[bytes] = []
    for ref in refs:
        out += read_block(root, ref).payloads()
    return out


def segment_names(root: str | os.PathLike[str], prefix: str = "") -> list[str]:
    """The segment files under ``root`` whose names start with ``prefix`` (none if the
    root does not exist)."""
    try:
        return sorted(p.name for p in Path(root).iterdir()
                      if p.name.startswith(prefix) and p.name.endswith(SUFFIX) and p.is_file())
    except FileNotFoundError:
        return []
