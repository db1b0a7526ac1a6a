# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The decoders' fast paths (``_fast``), compiled: the same functions, the same results.

Built at install when a C compiler and Cython are there; ``fastpaths`` picks this module when
it imports and ``_fast`` otherwise. Like ``_fast``, nothing here raises or decides that
bytes are malformed: every function stops at the first frame that is anything else or odd
in any way and leaves it to the general decoder, so the typed errors stay those of the
one pure-Python decoder. A buffer that is not ``bytes`` goes to ``_fast`` unchanged.
``tests/wire/test_compiled.py`` runs both on the same inputs.
"""

from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.list cimport PyList_Append
from libc.string cimport memcpy

from . import _fast
from .messages import OutgoingRpc, Rpc
from .outgoing import OutgoingFrame
from .records import check_bytes

_new = tuple.__new__


cdef inline bint _long_zz32(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                            long* value, Py_ssize_t* nxt) noexcept:
    # Two to five bytes, minimal, no overflow of 32 bits: the checks of ``_fast.long_zz32``.
    cdef unsigned long u = p[pos] & 0x7F
    cdef int shift = 7
    cdef Py_ssize_t q = pos + 1
    cdef Py_ssize_t stop = pos + 5
    cdef unsigned char c
    if end < stop:
        stop = end
    while q < stop:
        c = p[q]
        q += 1
        if c < 0x80:
            if c == 0 or (shift == 28 and c > 0x0F):
                return False
            u |= (<unsigned long>c) << shift
            value[0] = <long>(u >> 1) ^ -(<long>(u & 1))
            nxt[0] = q
            return True
        u |= (<unsigned long>(c & 0x7F)) << shift
        shift += 7
    return False


def long_zz32(buf, Py_ssize_t pos, Py_ssize_t end):
    """``_fast.long_zz32``: ``(value, next_pos)``, or None."""
    cdef long value
    cdef Py_ssize_t nxt
    if type(buf) is not bytes:
        return _fast.long_zz32(buf, pos, end)
    if pos < 0 or end > PyBytes_GET_SIZE(buf) or pos >= end:
        return _fast.long_zz32(buf, pos, end)
    if _long_zz32(<const unsigned char*>PyBytes_AS_STRING(buf), pos, end, &value, &nxt):
        return value, nxt
    return None


def incoming_rpcs(buf, Py_ssize_t pos, Py_ssize_t end, append):
    """``_fast.incoming_rpcs``: incoming-form RPC calls appended as ``Rpc``."""
    if type(buf) is not bytes or pos < 0 or end > PyBytes_GET_SIZE(buf):
        return _fast.incoming_rpcs(buf, pos, end, append)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(buf)
    cdef const char* s = PyBytes_AS_STRING(buf)
    cdef unsigned char b, m, t
    cdef long size, mid
    cdef Py_ssize_t body, msg_end, q
    rpc = Rpc
    new = _new
    while pos < end:
        b = p[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            body = pos + 1
        elif not _long_zz32(p, pos, end, &size, &body):
            return pos
        msg_end = body + size
        if size < 4 or msg_end > end or p[body] or p[body + 1]:
            return pos
        m = p[body + 2]
        if m < 0x80:
            t = p[body + 3]
            if t > 2:
                return pos
            mid = (m >> 1) ^ -(m & 1)
            q = body + 3
        else:
            if not _long_zz32(p, body + 2, msg_end, &mid, &q) or q >= msg_end:
                return pos
            t = p[q]
            if t > 2:
                return pos
        append(new(rpc, (mid, t, PyBytes_FromStringAndSize(s + q + 1, msg_end - q - 1), 0)))
        pos = msg_end
    return pos


cdef inline long long _i64(const unsigned char* p) noexcept:
    cdef unsigned long long u = 0
    cdef int i
    for i in range(7, -1, -1):
        u = (u << 8) | p[i]
    return <long long>u


cdef inline long _i32(const unsigned char* p) noexcept:
    return <int>((<unsigned int>p[3] << 24) | (<unsigned int>p[2] << 16)
                 | (<unsigned int>p[1] << 8) | p[0])


def incoming_records(buf, Py_ssize_t pos, last_seq, Py_ssize_t max_size, bint verify,
                     list out):
    """``_fast.incoming_records``: whole data records of incoming RPC calls."""
    if type(buf) is not bytes or pos < 0:
        return _fast.incoming_records(buf, pos, last_seq, max_size, verify, out)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(buf)
    cdef const char* s = PyBytes_AS_STRING(buf)
    cdef long length
    cdef long long seq
    cdef long long last = 0
    cdef bint have_last = last_seq is not None
    cdef Py_ssize_t end, taken
    if have_last:
        last = last_seq
    append = out.append
    while pos + 24 <= n:
        length = _i32(p + pos + 4)
        seq = _i64(p + pos + 16)
        end = pos + length
        if length < 24 or length > max_size or end > n or seq < 0 or (
                have_last and seq != last + 1):
            break
        if verify and (<unsigned long long>_i64(p + pos + 8)) != <unsigned long long>check_bytes(
                PyBytes_FromStringAndSize(s + pos + 24, length - 24)):
            break
        taken = len(out)
        if incoming_rpcs(buf, pos + 24, end, append) != end:
            del out[taken:]
            break
        pos = end
        last = seq
        have_last = True
    return pos, (last if have_last else None)


def outgoing_rpcs(buf, Py_ssize_t pos, Py_ssize_t limit, dict names, append, bint once):
    """``_fast.outgoing_rpcs``: outgoing-form RPCs appended as ``OutgoingRpc``."""
    if type(buf) is not bytes or pos < 0:
        return _fast.outgoing_rpcs(buf, pos, limit, names, append, once)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(buf)
    cdef const char* s = PyBytes_AS_STRING(buf)
    cdef unsigned char b, d, t
    cdef long size, mid
    cdef Py_ssize_t hdr, end, q, np
    rpc = OutgoingRpc
    new = _new
    while pos + 6 <= n:
        b = p[pos]
        if b < 0x80:
            hdr = pos + 1
            end = hdr + (b >> 1)
            if b & 1:
                break
        else:
            if not _long_zz32(p, pos, n, &size, &hdr) or size > limit:
                break
            end = hdr + size
        if end > n or hdr + 2 > end:
            break
        d = p[hdr + 1]
        np = hdr + 2 + (d >> 1)
        if p[hdr] or d & 0x81 or np + 3 > end or p[np]:
            break
        if p[np + 1] < 0x80:
            mid = (p[np + 1] >> 1) ^ -(p[np + 1] & 1)
            q = np + 2
        elif not _long_zz32(p, np + 1, end, &mid, &q) or q >= end:
            break
        t = p[q]
        if t > 2:
            break
        if d:
            raw = PyBytes_FromStringAndSize(s + hdr + 2, np - hdr - 2)
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
        append(new(rpc, (name, mid, t, PyBytes_FromStringAndSize(s + q + 1, end - q - 1), 0)))
        pos = end
        if once:
            break
    return pos


def outgoing_frames(buf, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t limit, dict names,
                    list out):
    """``_fast.outgoing_frames``: outgoing-form RPCs cut out as ``OutgoingFrame``."""
    if type(buf) is not bytes or pos < 0 or stop > PyBytes_GET_SIZE(buf):
        return _fast.outgoing_frames(buf, pos, stop, limit, names, out)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(buf)
    cdef const char* s = PyBytes_AS_STRING(buf)
    cdef unsigned char b, d
    cdef long size, mid
    cdef Py_ssize_t hdr, end, q, r, n
    cdef bint impulse
    cdef char* w
    new = _new
    frame_type = OutgoingFrame
    while pos + 3 <= stop:
        b = p[pos]
        if b < 0x80:
            if b & 1:
                break
            hdr = pos + 1
            end = hdr + (b >> 1)
        else:
            if not _long_zz32(p, pos, stop, &size, &hdr) or size <= 0 or size > limit:
                break
            end = hdr + size
        if end > stop or hdr + 3 > end or p[hdr]:
            break
        d = p[hdr + 1]
        r = hdr + 2 + (d >> 1)  # the reserved byte
        if d & 0x81 or r >= end:
            break
        impulse = False
        if not p[r]:
            if r + 1 >= end:
                break
            if p[r + 1] < 0x80:
                q = r + 2
            elif not _long_zz32(p, r + 1, end, &mid, &q):
                break
            if q >= end or p[q] > 2:
                break
            impulse = p[q] == 2
        if d:
            raw = PyBytes_FromStringAndSize(s + hdr + 2, r - hdr - 2)
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
        size = end - r + 1  # type byte + reserved byte onwards
        n = 1 if size < 64 else 2 if size < 8192 else 3 if size < 1048576 else 4 if size < 134217728 else 5
        incoming = PyBytes_FromStringAndSize(NULL, n + size)
        w = PyBytes_AS_STRING(incoming)
        mid = size << 1  # the ZigZag of a positive size
        for q in range(n - 1):
            w[q] = <char>((mid & 0x7F) | 0x80)
            mid >>= 7
        w[n - 1] = <char>mid
        w[n] = 0  # MessageType.RPC
        memcpy(w + n + 1, s + r, end - r)
        PyList_Append(out, new(frame_type, (
            name, incoming, PyBytes_FromStringAndSize(s + pos, end - pos), impulse)))
        pos = end
    return pos


def incoming_frame_count(body, Py_ssize_t pos, Py_ssize_t end):
    """``_fast.incoming_frame_count``: ``(count, where the counted frames end)``."""
    if type(body) is not bytes or pos < 0 or end > PyBytes_GET_SIZE(body):
        return _fast.incoming_frame_count(body, pos, end)
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(body)
    cdef unsigned char b
    cdef long size, mid
    cdef Py_ssize_t hdr, frame_end, q
    cdef Py_ssize_t count = 0
    while pos < end:
        b = p[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            hdr = pos + 1
        elif not _long_zz32(p, pos, end, &size, &hdr):
            break
        frame_end = hdr + size
        if size < 2 or frame_end > end or p[hdr]:
            break
        if not p[hdr + 1]:
            if hdr + 2 >= frame_end:
                break
            if p[hdr + 2] < 0x80:
                q = hdr + 3
            elif not _long_zz32(p, hdr + 2, frame_end, &mid, &q):
                break
            if q >= frame_end or p[q] > 2:
                break
        count += 1
        pos = frame_end
    return count, pos
