"""The watermarks that follow each data record on disk (not counted by its length)::

    zz32 nInputs {zz32 len, name, int64 lastProcessedID, int64 lastProcessedReplayableID}*
    zz32 nTrims  {zz32 len, name, int64 trimSeqNo}*

The trim entries are ours: an active/active primary's epoch (``EPOCH_KEY``), then, last
in every record, the record's own check bytes (``CHECK_KEY``): XXH64 of its header and of
its watermarks up to that value, its top bit set. The header's check bytes cover the
body, so every byte of a stored record is covered: a flipped bit in the committer id,
the length, a watermark or the epoch is damage, never a valid record with other
contents. With the top bit set a record's last byte is never zero, so a record read
whole is told from a write cut short over zeros, whose last byte is.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import xxhash

from ambrosia_core.errors import WireFormatError
from ambrosia_core.wire import HEADER_SIZE, Incomplete, decode_zz32, encode_zz32

__all__ = ["CHECK_ENTRY", "CHECK_KEY", "EPOCH_KEY", "TOP_BIT", "checked",
           "decode_watermarks", "encode_watermarks", "record_check"]

_I64 = struct.Struct("<q")
_TWO_I64 = struct.Struct("<qq")

# An active/active primary stamps its epoch on every record it writes, as a trim entry
# under a name no instance can have (names start with a letter or digit); followers use
# it to tell records written before a takeover from those a fenced primary wrote after.
EPOCH_KEY = "#epoch"
_EPOCH_RAW = EPOCH_KEY.encode()

# The last trim entry of every stored record: its check bytes (a name no instance can
# have either). ``CHECK_ENTRY`` is the entry up to its value: the 8 bytes that follow it
# end the record.
CHECK_KEY = "#check"
CHECK_ENTRY = encode_zz32(len(CHECK_KEY)) + CHECK_KEY.encode()
_U64 = struct.Struct("<Q")
#: Set in every record's check bytes: their last byte, the record's, is never zero.
TOP_BIT = 1 << 63
_xxh64 = xxhash.xxh64_intdigest
# The trims of a record without an epoch, up to its check bytes: count 1, the entry.
_USUAL_TRIMS = encode_zz32(1) + CHECK_ENTRY


def encode_watermarks(inputs: Mapping[str, int], epoch: int | None = None) -> bytes:
    """A record's watermarks up to its check bytes (``record_check`` gives them)."""
    parts = [encode_zz32(len(inputs))]
    for name, seq in sorted(inputs.items()):
        raw = name.encode("utf-8")
        parts += [encode_zz32(len(raw)), raw, _I64.pack(seq), _I64.pack(seq)]
    # The trim positions live in the checkpoint; the trim entries are the epoch, if
    # any, and the record's check bytes.
    if epoch is None:
        parts.append(encode_zz32(1))
    else:
        parts += [encode_zz32(2), encode_zz32(len(_EPOCH_RAW)), _EPOCH_RAW, _I64.pack(epoch)]
    parts.append(CHECK_ENTRY)
    return b"".join(parts)


def record_check(header: Any, marks: Any) -> bytes:
    """The 8 check bytes that end a stored record: XXH64 of its header (as stored) and of
    its watermarks up to them (``encode_watermarks``), with its top bit set."""
    return _U64.pack(_xxh64(bytes(header) + bytes(marks)) | TOP_BIT)


def checked(buf: Any, pos: int, body_end: int, end: int) -> bool:
    """Whether the stored record at ``pos``, whose body ends at ``body_end`` and whose
    watermarks (which ``decode_watermarks`` read) end at ``end``, ends in its check
    entry and the check bytes of its header and watermarks match."""
    at = end - 8
    if at - len(CHECK_ENTRY) < body_end or buf[at - len(CHECK_ENTRY) : at] != CHECK_ENTRY:
        return False
    want = _U64.unpack_from(buf, at)[0]
    got = _xxh64(bytes(buf[pos : pos + HEADER_SIZE]) + bytes(buf[body_end:at]))
    return got | TOP_BIT == want


def _zz32_at(buf: Any, pos: int, size: int) -> tuple[int, int]:
    """``decode_zz32`` at ``pos`` of a buffer that ends at ``size``: one-byte values (all
    counts and names in practice) without slicing the mmap."""
    if pos < size:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    n, used = decode_zz32(buf[pos : min(size, pos + 5)], 0)
    return n, pos + used


def decode_watermarks(buf: Any, pos: int, size: int,
                       names: dict[bytes, str] | None = None
                       ) -> tuple[dict[str, int], int, int]:
    """``(input watermarks, end, epoch)`` of the watermarks at ``pos``. ``names`` caches
    decoded names across the records of a scan (the same few senders recur)."""
    # The usual record: one input watermark (zz32 count 1 is the byte 2) whose name, of
    # a one-byte zz32 length, was seen before, and one trim entry, the check bytes.
    if names and pos + 2 <= size and buf[pos] == 2 and not buf[pos + 1] & 0x81:
        ln = buf[pos + 1] >> 1
        p = pos + 2 + ln
        if p + 32 <= size and buf[p + 16 : p + 24] == _USUAL_TRIMS:
            name = names.get(buf[pos + 2 : p])
            if name is not None:
                return {name: _I64.unpack_from(buf, p)[0]}, p + 32, 0
    return _decode_watermarks_general(buf, pos, size, names)


def _decode_watermarks_general(buf: Any, pos: int, size: int,
                               names: dict[bytes, str] | None
                               ) -> tuple[dict[str, int], int, int]:
    n, pos = _zz32_at(buf, pos, size)
    if n < 0 or n > 1 << 20:
        raise WireFormatError(f"{n} input watermarks")
    inputs: dict[str, int] = {}
    for _ in range(n):
        ln, pos = _zz32_at(buf, pos, size)
        if ln < 0 or ln > 4096:
            raise WireFormatError(f"watermark name length {ln}")
        if pos + ln + 16 > size:
            raise Incomplete
        raw = bytes(buf[pos : pos + ln])
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise WireFormatError("watermark name is not UTF-8") from None
        if names is not None and len(names) < 4096:  # bounded: senders are few
            names[raw] = name
        pos += ln
        inputs[name] = _I64.unpack_from(buf, pos)[0]
        pos += 16
    n, pos = _zz32_at(buf, pos, size)
    if n < 0 or n > 1 << 20:
        raise WireFormatError(f"{n} trim watermarks")
    epoch = 0
    for _ in range(n):
        ln, pos = _zz32_at(buf, pos, size)
        if ln < 0 or ln > 4096:
            raise WireFormatError(f"trim name length {ln}")
        if pos + ln + 8 > size:
            raise Incomplete
        if bytes(buf[pos : pos + ln]) == _EPOCH_RAW:
            epoch = _I64.unpack_from(buf, pos + ln)[0]
        pos += ln + 8
    return inputs, pos, epoch
