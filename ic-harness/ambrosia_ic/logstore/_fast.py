"""The log store's fast paths: hand-unrolled loops over the stored records of a
coordinator's log file, each with a general counterpart that it must agree with.

A stored record is a log record whose length field holds ``-length - 1``, followed by
its watermarks (``watermarks``); the layout is the log store's, so its loops live here
and not in the wire codec. Like the codec's fast paths, nothing here raises or decides
that bytes are damaged: each loop stops at the first record that is anything but the
usual one and leaves it to the general reader, which says what is wrong.
``_cfast.pyx`` holds the same functions compiled, ``fastpaths`` picks one of the two,
and ``tests/ic/test_logstore_compiled.py`` runs both on the same inputs.

- ``stored_spans``: a log file as a recovery scans it, records stored with one input
  watermark each (counterpart: the general reader of ``records.LogScan``, record by
  record; ``tests/ic/test_replay_wire.py`` holds them together over every damaged byte
  and cut of a log).
- ``stored_as_wire``: records a scan found, cut from the file into their wire form to be
  replayed (it checks only that each is still where the scan found it; it returns
  whether it stopped at a record that is not, and the caller raises).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any

from ambrosia_core.wire import check_bytes
from ambrosia_core.wire.records import HEADER

from .watermarks import CHECK_ENTRY, TOP_BIT

__all__ = ["stored_as_wire", "stored_spans"]

_header = HEADER.unpack_from
_set_length = struct.Struct("<i").pack_into
# The trims of the usual record up to its check bytes: one entry, the check bytes'.
_USUAL_TRIMS = b"\x02" + CHECK_ENTRY


def stored_spans(buf: Any, pos: int, size: int, committer_id: int | None, expect: int | None,
                 names: dict[bytes, str], inputs: dict[str, int], starts: array[int]
                 ) -> tuple[int, int, int | None]:
    """The usual records of a coordinator's log file from ``pos`` to ``size``:
    ``(next_pos, records taken, last sequence id taken or None)``.

    The usual stored record has the committer ``committer_id`` and the sequence id
    ``expect`` (None: any), and the watermarks of one input whose name is a key of
    ``names`` (names seen earlier in the scan) with no epoch: ``02, zz32 length, name,
    two int64, 02, the check entry, its 8 check bytes``; both check bytes intact. For
    each, its start is appended to ``starts`` and ``inputs[name]`` set to its input
    watermark. Anything else, a torn tail included, stops the loop there, for the
    general reader.
    """
    append = starts.append
    header, check_of, name_of = _header, check_bytes, names.get  # locals: a hot loop
    count = 0
    last = None
    # By the byte holding the name's length: the watermarks unpacked in one call.
    layouts: dict[int, tuple[Any, int]] = {}
    while size - pos >= 24:
        committer, stored, check, seq = header(buf, pos)
        end = pos - stored - 1  # where the body ends
        if (stored >= -24 or end + 2 >= size or seq < 0
                or (committer_id is not None and committer != committer_id)
                or (expect is not None and seq != expect)):
            break
        mark = buf[end + 1]
        layout = layouts.get(mark)
        if layout is None:
            if mark & 0x81:
                break
            packed = struct.Struct(f"<BB{mark >> 1}sqq8sQ")
            layout = layouts[mark] = (packed.unpack_from, packed.size)
        unpack, length = layout
        if end + length > size:
            break
        n, _, raw, value, _, trims, sealed = unpack(buf, end)
        name = name_of(raw) if n == 2 and trims == _USUAL_TRIMS else None
        if (name is None or check_of(buf[pos + 24 : end]) != check
                or check_of(buf[pos : pos + 24] + buf[end : end + length - 8]) | TOP_BIT
                != sealed):
            break
        inputs[name] = value
        append(pos)
        count += 1
        last = seq
        expect = seq + 1
        pos = end + length
    return pos, count, last


def stored_as_wire(buf: Any, offsets: Sequence[int], i: int, seq: int, max_bytes: int
                   ) -> tuple[bytes | bytearray, int, bool]:
    """The stored records that start at ``offsets[i:]``, whose sequence ids are ``seq``,
    ``seq + 1``, ..., in their wire form (positive length, no watermarks), one after
    another until there are ``max_bytes`` or more: ``(bytes, next index, ok)``.

    ``ok`` is False when the record at the next index is not a stored record of the
    expected sequence id that fits in ``buf`` (the file changed since it was scanned);
    nothing of it is taken.
    """
    size = len(buf)
    out = bytearray()
    n = len(offsets)
    while i < n:
        pos = offsets[i]
        if pos < 0 or pos + 24 > size:
            return out, i, False
        _, stored, _, got = _header(buf, pos)
        length = -stored - 1
        if got != seq or length < 24 or pos + length > size:
            return out, i, False
        at = len(out)
        out += buf[pos : pos + length]
        _set_length(out, at + 4, length)
        i += 1
        seq += 1
        if len(out) >= max_bytes:
            break
    return out, i, True
