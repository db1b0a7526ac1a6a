"""The file sink's txn log: an append-only log of its 2PC decisions (see ``sinkstore``).

Each record is ``U32 n | body (n bytes) | U64 xxh64(U32 n | body)``, big-endian, where the
body is ``U8 kind | U16 length + txn id (UTF-8) | U64 start | U64 end``. A record cut short
or failing its check at the very end of the log is a torn last write; one with more bytes
after it is corruption.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs
import xxhash

from .errors import SinkStoreCorruptError

__all__ = ["TxnLogKind", "TxnLogRecord", "decode_txnlog"]

_HEAD = struct.Struct(">I")
_CHECK = struct.Struct(">Q")
_RANGE = struct.Struct(">QQ")
_MAX_BODY: Final = 1 + 2 + 0xFFFF + _RANGE.size


class TxnLogKind(enum.IntEnum):
    PREPARE = 1
    COMMIT = 2
    ABORT = 3


@attrs.frozen
class TxnLogRecord:
    kind: TxnLogKind
    txn_id: str
    start: int
    end: int

    def encode(self) -> bytes:
        txn = self.txn_id.encode("utf-8")
        body = bytes([self.kind]) + struct.pack(">H", len(txn)) + txn
        body += _RANGE.pack(self.start, self.end)
        head = _HEAD.pack(len(body)) + body
        return head + _CHECK.pack(xxhash.xxh64_intdigest(head))


def decode_txnlog(data: bytes) -> tuple[list[TxnLogRecord], int]:
    """The records of a txn log and the length of its good prefix.

    A record cut short, or failing its check at the very end of ``data``, is a torn
    last write and ends the good prefix.

    Raises:
        SinkStoreCorruptError: a damaged record with more bytes after it.
    """
    records: list[TxnLogRecord] = []
    pos = 0
    while pos < len(data):
        if pos + _HEAD.size > len(data):
            break
        (n,) = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + n + _CHECK.size
        if n > _MAX_BODY:
            if end >= len(data):
                break  # a length torn mid-write
            raise SinkStoreCorruptError(f"txnlog record at byte {pos} claims {n} bytes")
        if end > len(data):
            break
        (check,) = _CHECK.unpack_from(data, end - _CHECK.size)
        record = _decode_body(data[pos + _HEAD.size : end - _CHECK.size])
        if check != xxhash.xxh64_intdigest(data[pos : end - _CHECK.size]) or record is None:
            if end == len(data):
                break
            raise SinkStoreCorruptError(f"txnlog record at byte {pos} fails its check bytes")
        records.append(record)
        pos = end
    return records, pos


def _decode_body(body: bytes) -> TxnLogRecord | None:
    if len(body) < 3 + _RANGE.size or body[0] not in TxnLogKind._value2member_map_:
        return None
    (size,) = struct.unpack_from(">H", body, 1)
    if len(body) != 3 + size + _RANGE.size:
        return None
    try:
        txn = body[3 : 3 + size].decode("utf-8")
    except UnicodeDecodeError:
        return None
    start, end = _RANGE.unpack_from(body, 3 + size)
    return TxnLogRecord(TxnLogKind(body[0]), txn, start, end)
