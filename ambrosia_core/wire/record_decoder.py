"""Coordinator -> binding: the incremental decoder of log records (and checkpoint bytes)."""

from __future__ import annotations

from typing import Any

from ..errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    RemoteProtocolError,
    SequenceGapError,
    WireFormatError,
)
from .buffering import (
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    Buffered,
    CheckpointChunk,
    CheckpointEnd,
    NeedData,
    located,
)
from .fastpaths import incoming_records
from .messages import Checkpoint, Direction, MessageType
from .packed import decode_messages
from .records import CHECKPOINT_SEQ, CONTROL_SEQ, HEADER, HEADER_SIZE, LogRecord, check_bytes

__all__ = ["LogRecordDecoder"]

_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__


class LogRecordDecoder(Buffered):
    """Coordinator -> binding: log records, and raw checkpoint bytes after a -2 record.

    Args:
        max_frame_size: the largest record accepted (header length field), in bytes.
        verify_checksums: check XXH64 of every data record (control and checkpoint
            records may carry 0 instead, as the real coordinator's do).
        direction: how to read RPCs inside records (``TO_BINDING`` for a binding;
            ``LINK`` for records exchanged between coordinators).

    Raises (from ``next_event``):
        WireFormatError, ChecksumMismatchError, SequenceGapError, FrameTooLargeError.
    """

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        verify_checksums: bool = True,
        direction: Direction = Direction.TO_BINDING,
    ) -> None:
        super().__init__(max_frame_size)
        self._need = HEADER_SIZE
        self.verify_checksums = verify_checksums
        self.direction = direction
        self.last_seq_id: int | None = None  # last data record's sequence id

    def take_incoming_rpcs(self, out: list[Any]) -> bool:
        """Fast path for a replay: the whole data records buffered now that hold only
        incoming RPC calls, their RPCs appended to ``out``; true if any were taken.

        The same records ``next_event`` would return, with the same checks; it stops at
        the first record that is anything else, fails a check or has not fully arrived,
        and leaves it to ``next_event`` (which also reports what is wrong). Never raises.
        """
        if (self._error is not None or self._ckpt_remaining >= 0
                or self.direction is Direction.TO_COORDINATOR):
            return False
        start = self._pos
        pos, last = incoming_records(self._buf, start, self.last_seq_id, self.max_frame_size,
                                     self.verify_checksums, out)
        if pos == start:
            return False
        self._pos = pos
        self.last_seq_id = last
        self._need = HEADER_SIZE
        return True

    def next_event(self) -> LogRecord | CheckpointChunk | CheckpointEnd | NeedData:
        if self._error is not None:
            raise self._error
        if self._ckpt_remaining >= 0:
            ev = self._checkpoint_event()
            if isinstance(ev, CheckpointEnd):
                self._need = HEADER_SIZE
            return ev
        avail = self._available()
        if avail < HEADER_SIZE:
            self._need = HEADER_SIZE
            return NEED_DATA
        buf = self._buf
        pos = self._pos
        committer, length, check, seq = HEADER.unpack_from(buf, pos)
        if length < HEADER_SIZE:
            self._fail(WireFormatError(
                f"record length {length} is smaller than the 24-byte header",
                offset=self._base + pos, seq_id=seq,
            ))
        if length > self.max_frame_size:
            self._fail(FrameTooLargeError(
                f"record length {length} exceeds the limit of {self.max_frame_size} bytes",
                offset=self._base + pos, seq_id=seq,
            ))
        if avail < length:
            self._need = length
            # Pull the rest in now if it has already arrived in pieces.
            if self._available() < length:
                return NEED_DATA
            buf = self._buf
            pos = self._pos
        end = pos + length
        body_start = pos + HEADER_SIZE
        if seq >= 0:
            last = self.last_seq_id
            if last is not None and seq != last + 1:
                self._fail(SequenceGapError(
                    f"data record sequence id {seq} follows {last}",
                    offset=self._base + pos, seq_id=seq,
                ))
            if self.verify_checksums and check != check_bytes(buf[body_start:end]):
                self._fail(ChecksumMismatchError(
                    "check bytes do not match the record body",
                    offset=self._base + pos, seq_id=seq,
                ))
        elif seq != CONTROL_SEQ and seq != CHECKPOINT_SEQ:
            self._fail(WireFormatError(
                f"negative sequence id {seq} is neither -1 (control) nor -2 (checkpoint)",
                offset=self._base + pos, seq_id=seq,
            ))
        elif check and self.verify_checksums and check != check_bytes(buf[body_start:end]):
            self._fail(ChecksumMismatchError(
                "check bytes do not match the record body",
                offset=self._base + pos, seq_id=seq,
            ))
        try:
            messages = decode_messages(buf, body_start, end, self.direction, self._base)
        except RemoteProtocolError as err:
            self._fail(located(err, err.offset, seq))
        if seq == CHECKPOINT_SEQ:
            if len(messages) != 1 or not isinstance(messages[0], Checkpoint):
                self._fail(WireFormatError(
                    "a checkpoint record (-2) must hold exactly one Checkpoint message",
                    offset=self._base + pos, seq_id=seq,
                ))
            self._start_checkpoint(messages[0].size)  # type: ignore[union-attr]
        else:
            for m in messages:
                if type(m) is Checkpoint:
                    self._fail(WireFormatError(
                        "a Checkpoint message outside a checkpoint record (-2)",
                        offset=self._base + pos, seq_id=seq,
                        message_type=MessageType.CHECKPOINT,
                    ))
            if seq >= 0:
                self.last_seq_id = seq
        self._pos = end
        self._need = HEADER_SIZE
        return _new(LogRecord, (committer, seq, messages, check))
