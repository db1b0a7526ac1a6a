"""Log records: the 24-byte header and the messages packed behind it.

```
[0..3]   int32  committer id
[4..7]   int32  total record length, header included
[8..15]  uint64 check bytes: XXH64 (seed 0) over the body
[16..23] int64  sequence id: 0,1,2,... data; -1 control; -2 checkpoint
```
A checkpoint record (-2) holds one ``Checkpoint`` message; the checkpoint's raw bytes
follow the record on the stream, outside it. Its check bytes are 0.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import xxhash

from ..errors import EncodeError
from .messages import Checkpoint, Message
from .typed import typed_equality

__all__ = [
    "CHECKPOINT_SEQ",
    "CONTROL_SEQ",
    "HEADER",
    "HEADER_SIZE",
    "LogRecord",
    "check_bytes",
    "encode_checkpoint_record",
    "encode_control_record",
    "encode_record",
]

HEADER = struct.Struct("<iiQq")
HEADER_SIZE = HEADER.size  # 24
CONTROL_SEQ = -1
CHECKPOINT_SEQ = -2

check_bytes = xxhash.xxh64_intdigest  # XXH64 with seed 0


@typed_equality
class LogRecord(NamedTuple):
    """A decoded log record. ``messages`` are in the order they were packed."""

    committer_id: int
    seq_id: int
    messages: list[Message]
    check_bytes: int = 0

    @property
    def is_data(self) -> bool:
        return self.seq_id >= 0

    def encode(self) -> bytes:
        body = b"".join(m.encode() for m in self.messages)
        if self.seq_id == CHECKPOINT_SEQ:
            return _pack(self.committer_id, body, 0, self.seq_id)
        return encode_record(self.committer_id, self.seq_id, body)


def _pack(committer_id: int, body: bytes, check: int, seq_id: int) -> bytes:
    length = HEADER_SIZE + len(body)
    if length > 0x7FFFFFFF:
        raise EncodeError(f"a log record of {length} bytes does not fit its int32 length")
    return HEADER.pack(committer_id, length, check, seq_id) + body


def encode_record(committer_id: int, seq_id: int, body: bytes) -> bytes:
    """A record with ``body`` (already-encoded messages) and XXH64 check bytes."""
    return _pack(committer_id, body, check_bytes(body), seq_id)


def encode_control_record(committer_id: int, message: Message) -> bytes:
    """A control record (sequence id -1) holding one message."""
    return encode_record(committer_id, CONTROL_SEQ, message.encode())


def encode_checkpoint_record(committer_id: int, size: int) -> bytes:
    """The record that announces ``size`` raw checkpoint bytes; send them right after it."""
    return _pack(committer_id, Checkpoint(size).encode(), 0, CHECKPOINT_SEQ)
