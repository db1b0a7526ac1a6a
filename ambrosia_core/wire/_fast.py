"""The decoders' fast paths, in one place: hand-unrolled loops for the frames that make
up almost all traffic, each with a general counterpart that it must agree with.

Every function here reads frames from ``pos`` on, appends the events it decodes, and
returns where it stopped: at the end of its input, or at the first frame that is anything
else or odd in any way (cut short, too long, a non-minimal varint, bad UTF-8, an unknown
RPC type). Such a frame is left to the general decoder, which reports what is wrong, so
a fast path never raises and never decides that bytes are malformed.
``tests/wire/test_fast_paths.py`` runs each one against its counterpart on the same
input.

- ``incoming_rpcs``: incoming-form RPC calls packed in a log record's body
  (counterpart: ``messages.decode_body`` frame by frame).
- ``outgoing_rpcs``: outgoing-form RPCs on a binding's stream, destination name of at
  most 63 bytes (counterpart: ``MessageStreamDecoder``'s general path).
- ``incoming_records``: whole data records whose bodies hold only incoming RPC calls, as a
  replay streams them (counterpart: ``LogRecordDecoder.next_event``, record by record).
- ``outgoing_frames``: outgoing-form RPCs on a binding's stream cut out as bytes, each
  turned into its incoming form by slicing, for a coordinator that passes them through
  (counterpart: the general decoder's ``OutgoingRpc``, its ``encode`` and the
  ``encode`` of its ``incoming()``; ``tests/ic/test_frames.py``).
- ``incoming_frame_count``: how many well-formed incoming-form RPC frames a link
  record's body holds (counterpart: ``ambrosia_ic``'s ``rpc_frame_count``, which says
  what is wrong with the frame this stops at).
``MessageStreamDecoder.next_event`` keeps one more fast path inline (a whole self-call
with a one-byte size and method id: a function call would cost a fifth of its time); the
same tests cover it through the decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .messages import OutgoingRpc, Rpc
from .outgoing import OutgoingFrame
from .records import HEADER, check_bytes
from .varint import encode_zz32

__all__ = ["incoming_frame_count", "incoming_records", "incoming_rpcs", "long_zz32",
           "outgoing_frames", "outgoing_rpcs"]

_header = HEADER.unpack_from

# NamedTuple.__new__ is a Python function; tuple.__new__ builds the same object in C.
_new = tuple.__new__
_IMPULSE = 2  # RpcType.IMPULSE
_SMALL_SIZES = tuple(bytes((n << 1, 0)) for n in range(64))  # a one-byte size, type RPC


def long_zz32(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """A ZigZagInt of two to five bytes at ``pos`` (its first byte is >= 0x80) that ends
    by ``end``: ``(value, next_pos)``, or None for anything the general decoder must see
    (cut short, too long, not minimal)."""
    u = buf[pos] & 0x7F
    shift = 7
    q = pos + 1
    stop = min(end, pos + 5)
    while q < stop:
        c = buf[q]
        q += 1
        if c < 0x80:
            if c == 0 or (shift == 28 and c > 0x0F):
                return None
            u |= c << shift
            return (u >> 1) ^ -(u & 1), q
        u |= (c & 0x7F) << shift
        shift += 7
    return None


def incoming_rpcs(buf: bytes, pos: int, end: int, append: Callable[[Any], None]) -> int:
    """Incoming-form RPC calls (reserved byte 0, method id of any length) in
    ``buf[pos:end]``, each appended as an ``Rpc``."""
    while pos < end:
        b = buf[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            body = pos + 1
        else:
            sized = long_zz32(buf, pos, end)
            if sized is None:
                return pos
            size, body = sized
        msg_end = body + size
        if size < 4 or msg_end > end or buf[body] or buf[body + 1]:
            return pos
        m = buf[body + 2]
        if m < 0x80:
            t = buf[body + 3]
            if t > 2:
                return pos
            append(_new(Rpc, ((m >> 1) ^ -(m & 1), t, buf[body + 4 : msg_end], 0)))
        else:
            mid = long_zz32(buf, body + 2, msg_end)
            if mid is None or mid[1] >= msg_end or buf[mid[1]] > 2:
                return pos
            q = mid[1]
            append(_new(Rpc, (mid[0], buf[q], buf[q + 1 : msg_end], 0)))
        pos = msg_end
    return pos


def outgoing_rpcs(buf: bytes, pos: int, limit: int, names: dict[bytes, str],
                  append: Callable[[Any], None], once: bool) -> int:
    """Outgoing-form RPCs (reserved byte 0) in ``buf[pos:]`` whose sizes are at most
    ``limit``, each appended as an ``OutgoingRpc`` (just one if ``once``). ``names``
    caches decoded destination names (bounded: destinations are few)."""
    n = len(buf)
    while pos + 6 <= n:
        b = buf[pos]
        if b < 0x80:
            hdr = pos + 1
            end = hdr + (b >> 1)
            if b & 1:
                break
        else:
            sized = long_zz32(buf, pos, n)
            if sized is None or sized[0] > limit:
                break
            hdr = sized[1]
            end = hdr + sized[0]
        if end > n or hdr + 2 > end:
            break
        d = buf[hdr + 1]
        p = hdr + 2 + (d >> 1)
        if buf[hdr] or d & 0x81 or p + 3 > end or buf[p]:
            break
        m = buf[p + 1]
        if m < 0x80:
            mid = (m >> 1) ^ -(m & 1)
            q = p + 2
        else:
            got = long_zz32(buf, p + 1, end)
            if got is None or got[1] >= end:
                break
            mid, q = got
        t = buf[q]
        if t > 2:
            break
        if d:
            raw = buf[hdr + 2 : p]
            name = names.get(raw)
            if name is None:
                try:
                    name = raw.decode("utf-8")
                except UnicodeDecodeError:
                    break
                if len(names) < 4096:
                    names[raw] = name
        else:
            name = ""
        append(_new(OutgoingRpc, (name, mid, t, buf[q + 1 : end], 0)))
        pos = end
        if once:
            break
    return pos


def outgoing_frames(buf: bytes, pos: int, stop: int, limit: int, names: dict[bytes, str],
                    out: list[OutgoingFrame]) -> int:
    """The whole outgoing-form RPC frames of at most ``limit`` bytes at ``buf[pos:stop]``
    (destination names of at most 63 bytes, minimal varints), each appended to ``out``
    as an ``OutgoingFrame``; returns where they stop. ``names`` caches decoded
    destination names (bounded: destinations are few)."""
    append = out.append
    while pos + 3 <= stop:
        b = buf[pos]
        if b < 0x80:
            if b & 1:
                break
            hdr = pos + 1
            end = hdr + (b >> 1)
        else:
            sized = long_zz32(buf, pos, stop)
            if sized is None or not 0 < sized[0] <= limit:
                break
            hdr = sized[1]
            end = hdr + sized[0]
        if end > stop or hdr + 3 > end or buf[hdr]:
            break
        d = buf[hdr + 1]
        p = hdr + 2 + (d >> 1)  # the reserved byte
        if d & 0x81 or p >= end:
            break
        impulse = False
        if not buf[p]:
            m = buf[p + 1] if p + 1 < end else 0x80
            if m < 0x80:
                q = p + 2
            else:
                got = long_zz32(buf, p + 1, end) if p + 1 < end else None
                if got is None:
                    break
                q = got[1]
            if q >= end or buf[q] > 2:
                break
            impulse = buf[q] == _IMPULSE
        if d:
            raw = buf[hdr + 2 : p]
            name = names.get(raw)
            if name is None:
                try:
                    name = raw.decode("utf-8")
                except UnicodeDecodeError:
                    break
                if len(names) < 4096:
                    names[raw] = name
        else:
            name = ""
        size = end - p + 1  # type byte + reserved byte onwards
        head = _SMALL_SIZES[size] if size < 64 else encode_zz32(size) + b"\x00"
        append(_new(OutgoingFrame, (name, head + buf[p:end], buf[pos:end], impulse)))
        pos = end
    return pos


def incoming_frame_count(body: bytes, pos: int, end: int) -> tuple[int, int]:
    """How many well-formed incoming-form RPC frames follow one another in
    ``body[pos:end]``, and where the last of them ends: the size a minimal varint of at
    least 2 and within ``end``, the type RPC and, for a call (reserved byte 0), a
    minimal method id followed by an RPC type of at most 2."""
    count = 0
    while pos < end:
        b = body[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            hdr = pos + 1
        else:
            sized = long_zz32(body, pos, end)
            if sized is None:
                break
            size, hdr = sized
        frame_end = hdr + size
        if size < 2 or frame_end > end or body[hdr]:
            break
        if not body[hdr + 1]:
            m = body[hdr + 2] if hdr + 2 < frame_end else 0x80
            if m < 0x80:
                q = hdr + 3
            else:
                got = long_zz32(body, hdr + 2, frame_end) if hdr + 2 < frame_end else None
                if got is None:
                    break
                q = got[1]
            if q >= frame_end or body[q] > 2:
                break
        count += 1
        pos = frame_end
    return count, pos



def incoming_records(buf: bytes, pos: int, last_seq: int | None, max_size: int, verify: bool,
                     out: list[Any]) -> tuple[int, int | None]:
    """Whole data records in ``buf[pos:]`` that hold only incoming RPC calls, their RPCs
    appended to ``out`` as ``Rpc``: ``(next_pos, last_seq)``. Each record passes the
    checks of ``LogRecordDecoder.next_event`` (length, the sequence id following
    ``last_seq``, the check bytes if ``verify``); at the first record that is anything
    else, fails a check, or is cut short, nothing of it is appended and it is left there."""
    n = len(buf)
    while pos + 24 <= n:
        _committer, length, check, seq = _header(buf, pos)
        end = pos + length
        if (length < 24 or length > max_size or end > n or seq < 0
                or (last_seq is not None and seq != last_seq + 1)
                or (verify and check != check_bytes(buf[pos + 24 : end]))):
            break
        taken = len(out)
        if incoming_rpcs(buf, pos + 24, end, out.append) != end:
            del out[taken:]
            break
        pos = end
        last_seq = seq
    return pos, last_seq
