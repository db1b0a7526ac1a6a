# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The log store's fast paths (``_fast``), compiled: the same functions, the same results.

Built at install when a C compiler and Cython are there; ``fastpaths`` picks this module
or ``_fast`` by the wire codec's rule (``AMBROSIA_PY_CODEC``). Like ``_fast``, nothing here raises or decides that bytes are
damaged: every loop stops at the first record that is anything but the usual one and
leaves it to the general reader. Arguments of other types than those the loops read in C
(an offsets list instead of an ``array("q")``, say) go to ``_fast`` unchanged.
``tests/ic/test_logstore_compiled.py`` runs both on the same inputs.
"""

from array import array

from cpython.buffer cimport PyObject_CheckBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcmp, memcpy


from . import _fast
from .watermarks import CHECK_ENTRY, TOP_BIT

# The trims of the usual record up to its check bytes (``_fast._USUAL_TRIMS``).
cdef bytes _USUAL_TRIMS = b"\x02" + CHECK_ENTRY
assert len(_USUAL_TRIMS) == 8


# Little-endian fixed integers of the record header (the wire codec's ``_cfast`` reads
# them the same way; a .pxd shared across the two packages is not worth its build step).
cdef inline long long _i64(const unsigned char* p) noexcept:
    cdef unsigned long long u = 0
    cdef int i
    for i in range(7, -1, -1):
        u = (u << 8) | p[i]
    return <long long>u


cdef inline long _i32(const unsigned char* p) noexcept:
    return <int>((<unsigned int>p[3] << 24) | (<unsigned int>p[2] << 16)
                 | (<unsigned int>p[1] << 8) | p[0])


# XXH64 with seed 0 (the records' check bytes), in C from the algorithm's specification:
# a call into the ``xxhash`` package per record, with the bytes it needs, cost as much
# as the rest of the scan. ``xxh64`` (below) is checked against that package.
cdef unsigned long long _P1 = 0x9E3779B185EBCA87ULL
cdef unsigned long long _P2 = 0xC2B2AE3D27D4EB4FULL
cdef unsigned long long _P3 = 0x165667B19E3779F9ULL
cdef unsigned long long _P4 = 0x85EBCA77C2B2AE63ULL
cdef unsigned long long _P5 = 0x27D4EB2F165667C5ULL


cdef inline unsigned long long _rotl(unsigned long long x, int r) noexcept:
    return (x << r) | (x >> (64 - r))


cdef inline unsigned long long _round(unsigned long long acc,
                                      unsigned long long lane) noexcept:
    acc += lane * _P2
    return _rotl(acc, 31) * _P1


cdef inline unsigned long long _merge(unsigned long long acc,
                                      unsigned long long v) noexcept:
    acc ^= _round(0, v)
    return acc * _P1 + _P4


cdef unsigned long long _xxh64(const unsigned char* p, Py_ssize_t n) noexcept:
    cdef const unsigned char* end = p + n
    cdef unsigned long long v1, v2, v3, v4, acc
    if n >= 32:
        v1 = _P1 + _P2
        v2 = _P2
        v3 = 0
        v4 = 0 - _P1
        while end - p >= 32:
            v1 = _round(v1, <unsigned long long>_i64(p))
            v2 = _round(v2, <unsigned long long>_i64(p + 8))
            v3 = _round(v3, <unsigned long long>_i64(p + 16))
            v4 = _round(v4, <unsigned long long>_i64(p + 24))
            p += 32
        acc = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        acc = _merge(acc, v1)
        acc = _merge(acc, v2)
        acc = _merge(acc, v3)
        acc = _merge(acc, v4)
    else:
        acc = _P5
    acc += <unsigned long long>n
    while end - p >= 8:
        acc ^= _round(0, <unsigned long long>_i64(p))
        acc = _rotl(acc, 27) * _P1 + _P4
        p += 8
    if end - p >= 4:
        acc ^= (<unsigned long long>(<unsigned int>_i32(p))) * _P1
        acc = _rotl(acc, 23) * _P2 + _P3
        p += 4
    while p < end:
        acc ^= p[0] * _P5
        acc = _rotl(acc, 11) * _P1
        p += 1
    acc ^= acc >> 33
    acc *= _P2
    acc ^= acc >> 29
    acc *= _P3
    acc ^= acc >> 32
    return acc


def xxh64(data) -> int:
    """XXH64 with seed 0 of ``data`` (a bytes-like object), as the scans compute it."""
    cdef const unsigned char[::1] view = data
    if view.shape[0] == 0:
        return _xxh64(<const unsigned char*>b"", 0)
    return _xxh64(&view[0], view.shape[0])


cdef void _flush_starts(starts, long long* pending, Py_ssize_t* k):
    if k[0]:
        starts.frombytes(PyBytes_FromStringAndSize(<const char*>pending, k[0] * 8))
        k[0] = 0


def stored_spans(buf, Py_ssize_t pos, Py_ssize_t size, committer_id, expect, dict names,
                 dict inputs, starts):
    """``_fast.stored_spans``: the usual stored records of a coordinator's log file."""
    if (pos < 0 or size < 0 or not isinstance(starts, array)
            or starts.typecode != "q" or not PyObject_CheckBuffer(buf)):
        return _fast.stored_spans(buf, pos, size, committer_id, expect, names, inputs, starts)
    cdef const unsigned char[::1] view = buf
    if size > view.shape[0]:
        return _fast.stored_spans(buf, pos, size, committer_id, expect, names, inputs, starts)
    if size - pos < 24:
        return pos, 0, None
    cdef const unsigned char* p = &view[0]
    cdef bint any_cid = committer_id is None
    cdef long cid = 0 if any_cid else committer_id
    cdef bint any_seq = expect is None
    cdef long long want = 0 if any_seq else expect
    cdef long stored
    cdef long long seq
    cdef long long last = 0
    cdef Py_ssize_t count = 0, end, q, ln
    cdef unsigned char mark
    # The name of the last record and its watermark, set in ``inputs`` when the name
    # changes and at the end: senders come in runs.
    cdef object name = None
    cdef object key = None
    cdef bint have_value = False
    cdef const char* raw = NULL
    cdef Py_ssize_t raw_len = -1
    cdef long long value = 0
    cdef long long pending[512]
    cdef Py_ssize_t k = 0
    # The header and the watermarks up to the check bytes, as they are hashed (the
    # name's length is one zz32 byte: at most 63 bytes).
    cdef unsigned char sealed[128]
    cdef const char* usual = PyBytes_AS_STRING(_USUAL_TRIMS)
    cdef unsigned long long top = TOP_BIT
    try:
        while size - pos >= 24:
            stored = _i32(p + pos + 4)
            seq = _i64(p + pos + 16)
            end = pos - stored - 1
            if (stored >= -24 or end + 2 >= size or seq < 0
                    or (not any_cid and _i32(p + pos) != cid)
                    or (not any_seq and seq != want)):
                break
            mark = p[end + 1]
            if p[end] != 2 or mark & 0x81:
                break
            ln = mark >> 1
            q = end + 2 + ln
            if q + 32 > size or memcmp(p + q + 16, usual, 8) != 0:
                break
            if ln != raw_len or memcmp(raw, p + end + 2, ln) != 0:
                found = names.get(PyBytes_FromStringAndSize(<const char*>p + end + 2, ln))
                if found is None:
                    break
                if have_value:
                    inputs[name] = value
                    have_value = False
                name = found
                key = PyBytes_FromStringAndSize(<const char*>p + end + 2, ln)
                raw = PyBytes_AS_STRING(key)
                raw_len = ln
            if (<unsigned long long>_i64(p + pos + 8)) != _xxh64(p + pos + 24, end - pos - 24):
                break
            memcpy(sealed, p + pos, 24)
            memcpy(sealed + 24, p + end, q + 24 - end)
            if (<unsigned long long>_i64(p + q + 24)) != (_xxh64(sealed, q + 48 - end) | top):
                break
            value = _i64(p + q)
            have_value = True
            pending[k] = pos
            k += 1
            if k == 512:
                _flush_starts(starts, pending, &k)
            count += 1
            last = seq
            want = seq + 1
            any_seq = False
            pos = q + 32
    finally:
        _flush_starts(starts, pending, &k)
        if have_value:
            inputs[name] = value
    return pos, count, (last if count else None)


def stored_as_wire(buf, offsets, Py_ssize_t i, long long seq, Py_ssize_t max_bytes):
    """``_fast.stored_as_wire``: stored records cut into their wire form."""
    if (i < 0 or not isinstance(offsets, array) or offsets.typecode != "q"
            or not PyObject_CheckBuffer(buf)):
        return _fast.stored_as_wire(buf, offsets, i, seq, max_bytes)
    cdef const unsigned char[::1] view = buf
    cdef const long long[::1] offs = offsets
    cdef Py_ssize_t size = view.shape[0]
    cdef Py_ssize_t n = offs.shape[0]
    cdef Py_ssize_t first = i, total = 0, pos, length, at, j
    cdef long stored
    cdef bint ok = True
    # First the records to take and their size, then one copy each into the result.
    while i < n:
        pos = offs[i]
        if pos < 0 or pos + 24 > size:
            ok = False
            break
        stored = _i32(&view[pos + 4])
        length = -(<Py_ssize_t>stored) - 1
        if _i64(&view[pos + 16]) != seq or length < 24 or pos + length > size:
            ok = False
            break
        total += length
        i += 1
        seq += 1
        if total >= max_bytes:
            break
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* dst = PyBytes_AS_STRING(out)
    at = 0
    for j in range(first, i):
        pos = offs[j]
        length = -(<Py_ssize_t>_i32(&view[pos + 4])) - 1
        memcpy(dst + at, &view[pos], length)
        dst[at + 4] = length & 0xFF
        dst[at + 5] = (length >> 8) & 0xFF
        dst[at + 6] = (length >> 16) & 0xFF
        dst[at + 7] = (length >> 24) & 0xFF
        at += length
    return out, i, ok
