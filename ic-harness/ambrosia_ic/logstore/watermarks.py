"""The watermarks that follow each data record on disk (not counted by its length)::

    zz32 nInputs {zz32 len, name, int64 lastProcessedID, int64 lastProcessedReplayableID}*
    zz32 nTrims  {zz32 len, name, int64 trimSeqNo}*
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from ambrosia_core.errors import WireFormatError
from ambrosia_core.wire import Incomplete, decode_zz32, encode_zz32

__all__ = ["EPOCH_KEY", "cut_short", "decode_watermarks", "encode_watermarks"]

_I64 = struct.Struct("<q")
_TWO_I64 = struct.Struct("<qq")

# An active/active primary stamps its epoch on every record it writes, as a trim entry
# under a name no instance can have (names start with a letter or digit); followers use
# it to tell records written before a takeover from those a fenced primary wrote after.
EPOCH_KEY = "#epoch"
_EPOCH_RAW = EPOCH_KEY.encode()


def encode_watermarks(inputs: Mapping[str, int], epoch: int | None = None) -> bytes:
    parts = [encode_zz32(len(inputs))]
    for name, seq in sorted(inputs.items()):
        raw = name.encode("utf-8")
        parts += [encode_zz32(len(raw)), raw, _I64.pack(seq), _I64.pack(seq)]
    # The trim positions live in the checkpoint; the only trim entry is the epoch.
    if epoch is None:
        parts.append(encode_zz32(0))
    else:
        parts += [encode_zz32(1), encode_zz32(len(_EPOCH_RAW)), _EPOCH_RAW, _I64.pack(epoch)]
    return b"".join(parts)


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
    # a one-byte zz32 length, was seen before, and no trims (zz32 count 0).
    if names and pos + 2 <= size and buf[pos] == 2 and not buf[pos + 1] & 0x81:
        ln = buf[pos + 1] >> 1
        p = pos + 2 + ln
        if p + 17 <= size and buf[p + 16] == 0:
            name = names.get(buf[pos + 2 : p])
            if name is not None:
                return {name: _I64.unpack_from(buf, p)[0]}, p + 17, 0
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


def cut_short(buf: Any, pos: int, end: int) -> bool:
    """Whether the watermarks at ``pos``..``end`` (which ``decode_watermarks`` read)
    show the marks of a write cut short over zeros: an empty name or one with a zero
    byte, an input's two watermarks unequal (``encode_watermarks`` writes each twice) or
    zero (link and self-call numbers start at 1), or an epoch of zero.

    A record's check bytes cover its body only; a write into space filled with zeros
    that stopped inside the watermarks leaves zeros that parse. A name is never empty
    nor holds a zero byte, so a cut in a name or its length shows; a cut in the first
    watermark leaves it unequal to the second (zero); a cut in the second leaves the
    first whole, and a cut at the start of the first leaves both zero. What a cut before
    the count of inputs or of trims leaves (none) is the caller's to judge, against the
    records before it.
    """
    n, pos = _zz32_at(buf, pos, end)
    for _ in range(n):
        ln, pos = _zz32_at(buf, pos, end)
        if ln <= 0 or 0 in buf[pos : pos + ln]:
            return True
        first, second = _TWO_I64.unpack_from(buf, pos + ln)
        if first != second or first <= 0:
            return True
        pos += ln + 16
    n, pos = _zz32_at(buf, pos, end)
    for _ in range(n):
        ln, pos = _zz32_at(buf, pos, end)
        if ln <= 0 or 0 in buf[pos : pos + ln]:
            return True
        if bytes(buf[pos : pos + ln]) == _EPOCH_RAW and _I64.unpack_from(buf, pos + ln)[0] <= 0:
            return True
        pos += ln + 8
    return False
