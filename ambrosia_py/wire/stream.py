"""Incremental (sans-IO) decoders for the two directions of the binding's sockets.

Both follow one pattern: ``receive_data(bytes)`` buffers, ``next_event()`` returns the
next event or ``NEED_DATA``. Input may be split at any byte. Checkpoint bytes are passed
through as ``CheckpointChunk`` events as they arrive, so a checkpoint far larger than
memory never sits in a buffer; a ``CheckpointEnd`` closes it. Every buffer is bounded:
a frame that claims more than ``max_frame_size`` bytes is rejected before it is read.

After an error the decoder is broken: every later call raises the same error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, NamedTuple

from ..errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    RemoteProtocolError,
    SequenceGapError,
    WireFormatError,
)
from ._fast import outgoing_rpcs
from .messages import (
    Checkpoint,
    Direction,
    Message,
    MessageType,
    OutgoingRpc,
    decode_body,
)
from .packed import decode_messages
from .records import CHECKPOINT_SEQ, CONTROL_SEQ, HEADER, HEADER_SIZE, LogRecord, check_bytes
from .varint import Incomplete, decode_zz32

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "CheckpointChunk",
    "CheckpointEnd",
    "LogRecordDecoder",
    "MessageStreamDecoder",
    "NeedData",
]

DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__


class NeedData:
    """Sentinel type: feed more bytes."""

    _instance: NeedData | None = None

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


class CheckpointChunk(NamedTuple):
    """Some of the raw checkpoint bytes that follow a ``Checkpoint`` message."""

    data: bytes


class CheckpointEnd(NamedTuple):
    """All ``size`` raw bytes of the checkpoint have been delivered."""

    size: int


StreamEvent = LogRecord | Message | CheckpointChunk | CheckpointEnd | NeedData


def _located(
    err: RemoteProtocolError, offset: int | None, seq_id: int | None
) -> RemoteProtocolError:
    """The same error, told where in the stream (and in which record) it happened."""
    return type(err)(err.reason, offset=offset, seq_id=seq_id, message_type=err.message_type)


class _Buffered:
    """Buffering shared by both decoders: chunks are joined only once a frame is whole,
    so a large frame fed in small pieces is copied once, not once per piece."""

    def __init__(self, max_frame_size: int) -> None:
        if max_frame_size < HEADER_SIZE:
            raise ValueError("max_frame_size is too small for a log record header")
        self.max_frame_size = max_frame_size
        self._buf = b""
        self._pos = 0
        self._base = 0  # stream offset of self._buf[0]
        self._chunks: list[bytes] = []
        self._chunk_len = 0
        self._need = 1  # bytes needed after _pos before parsing can progress
        self._ckpt_remaining = -1  # >= 0 while streaming checkpoint bytes
        self._ckpt_size = 0
        self._error: RemoteProtocolError | None = None

    # -------------------------------------------------------------- input
    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the peer."""
        if self._error is not None:
            raise self._error
        if data:
            self._chunks.append(bytes(data))
            self._chunk_len += len(data)
            if len(self._buf) - self._pos + self._chunk_len > (
                self.max_frame_size + max(len(data), 1 << 20)
            ):
                # A frame is parsed as soon as it is whole, so this much unparsed input
                # means the caller is not draining events; refuse to grow without bound.
                self._fail(FrameTooLargeError(
                    "unparsed input exceeds the frame bound; drain events between feeds",
                    offset=self.offset,
                ))

    @property
    def offset(self) -> int:
        """Stream offset of the next byte to parse."""
        return self._base + self._pos

    @property
    def buffered(self) -> int:
        """Bytes received but not yet turned into events."""
        return len(self._buf) - self._pos + self._chunk_len

    @property
    def at_boundary(self) -> bool:
        """True when no partial frame or checkpoint is pending (a clean place to stop)."""
        return self.buffered == 0 and self._ckpt_remaining < 0

    @property
    def in_checkpoint(self) -> bool:
        """True while raw checkpoint bytes are being passed through."""
        return self._ckpt_remaining >= 0

    def _fail(self, err: RemoteProtocolError) -> None:
        self._error = err
        raise err

    def _available(self) -> int:
        """Bytes ready to parse in ``_buf``; joins pending chunks once enough have come."""
        avail = len(self._buf) - self._pos
        if (self._chunks and avail < self._need <= avail + self._chunk_len) or (
            self._chunks and avail == 0
        ):
            if avail:
                self._buf = self._buf[self._pos :] + b"".join(self._chunks)
            elif len(self._chunks) == 1:
                self._buf = self._chunks[0]
            else:
                self._buf = b"".join(self._chunks)
            self._base += self._pos
            self._pos = 0
            self._chunks.clear()
            self._chunk_len = 0
            avail = len(self._buf)
        return avail

    def _checkpoint_event(self) -> CheckpointChunk | CheckpointEnd | NeedData:
        remaining = self._ckpt_remaining
        if remaining == 0:
            self._ckpt_remaining = -1
            self._need = 1
            return CheckpointEnd(self._ckpt_size)
        avail = len(self._buf) - self._pos
        if avail:
            n = min(avail, remaining)
            data = self._buf[self._pos : self._pos + n]
            self._pos += n
        elif self._chunks:
            data = self._chunks.pop(0)
            self._chunk_len -= len(data)
            if len(data) > remaining:
                rest = data[remaining:]
                data = data[:remaining]
                self._base += len(self._buf) + remaining
                self._buf = rest
                self._pos = 0
            else:
                self._base += len(data)
        else:
            return NEED_DATA
        self._ckpt_remaining = remaining - len(data)
        return CheckpointChunk(data)

    def _start_checkpoint(self, size: int) -> None:
        self._ckpt_remaining = size
        self._ckpt_size = size

    def next_event(self) -> StreamEvent:  # pragma: no cover - overridden
        raise NotImplementedError

    def drain(self) -> list[StreamEvent]:
        """Every event that the buffered bytes make now, as a list (``NEED_DATA`` excluded).

        The same events as calling ``next_event`` until ``NEED_DATA``, with less overhead.
        """
        out: list[StreamEvent] = []
        next_event = self.next_event
        while (ev := next_event()) is not NEED_DATA:
            out.append(ev)
        return out

    def events(self) -> Iterator[StreamEvent]:
        """Every event that the buffered bytes make, until more data is needed."""
        while True:
            ev = self.next_event()
            if ev is NEED_DATA:
                return
            yield ev


class LogRecordDecoder(_Buffered):
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
            self._fail(_located(err, err.offset, seq))
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


class MessageStreamDecoder(_Buffered):
    """Binding -> coordinator: a bare stream of messages; raw bytes follow a Checkpoint.

    Args:
        max_frame_size: the largest message accepted, in bytes.
        direction: ``TO_COORDINATOR`` (a binding's receive-port stream) or ``LINK``.
    """

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        direction: Direction = Direction.TO_COORDINATOR,
    ) -> None:
        super().__init__(max_frame_size)
        self.direction = direction
        # The hot path reads outgoing-form RPCs of at most 63 bytes without bound checks.
        self._fast = direction is Direction.TO_COORDINATOR and max_frame_size >= 64
        self._names: dict[bytes, str] = {}

    def drain(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        append = out.append
        names = self._names
        while True:
            if self._fast and self._error is None and self._ckpt_remaining < 0:
                # Hot loop: outgoing-form RPCs with a one-byte name length (sizes and
                # method ids of any length); the first frame that is anything else, or
                # odd in any way, goes to next_event, which reports what is wrong.
                self._pos = outgoing_rpcs(self._buf, self._pos, self.max_frame_size, names,
                                          append, False)
            ev = self.next_event()
            if ev is NEED_DATA:
                return out
            append(ev)

    def next_event(self) -> Message | CheckpointChunk | CheckpointEnd | NeedData:
        buf = self._buf
        pos = self._pos
        if self._fast and pos + 6 <= len(buf) and self._error is None and self._ckpt_remaining < 0:
            # Hot path: a whole self-call RPC with one-byte size and method id is buffered.
            # Anything else (or anything odd about this one) takes ``_fast.outgoing_rpcs``
            # and then the general path below. Kept inline: a call costs a fifth of this
            # path's time. tests/wire/test_fast_paths.py checks it against the general path.
            b = buf[pos]
            end = pos + 1 + (b >> 1)
            if (
                b < 0x80 and not b & 1 and end <= len(buf) and buf[pos + 1] == 0
                and buf[pos + 2] == 0 and buf[pos + 3] == 0
            ):
                m = buf[pos + 4]
                t = buf[pos + 5]
                if m < 0x80 and t < 3:
                    self._pos = end
                    return _new(OutgoingRpc, ("", (m >> 1) ^ -(m & 1), t, buf[pos + 6 : end], 0))
            got: list[StreamEvent] = []
            self._pos = outgoing_rpcs(buf, pos, self.max_frame_size, self._names, got.append,
                                      True)
            if got:
                return got[0]  # type: ignore[return-value]
        if self._error is not None:
            raise self._error
        if self._ckpt_remaining >= 0:
            return self._checkpoint_event()
        avail = self._available()
        if not avail:
            self._need = 1
            return NEED_DATA
        buf = self._buf
        pos = self._pos
        try:
            size, body = decode_zz32(buf, pos)
        except Incomplete:
            self._need = avail + 1
            if self._available() == avail:
                return NEED_DATA
            return self.next_event()
        except RemoteProtocolError as err:
            self._fail(_located(err, self._base + pos, None))
        if size < 1:
            self._fail(WireFormatError(
                f"message size {size} must be at least 1 (the type byte)",
                offset=self._base + pos,
            ))
        if size > self.max_frame_size:
            self._fail(FrameTooLargeError(
                f"message size {size} exceeds the limit of {self.max_frame_size} bytes",
                offset=self._base + pos,
            ))
        end = body + size
        if end - pos > avail:
            self._need = end - pos
            if self._available() < end - pos:
                return NEED_DATA
            return self.next_event()
        try:
            msg = decode_body(buf[body], buf, body + 1, end, self.direction, self._base)
        except RemoteProtocolError as err:
            self._fail(err)
        self._pos = end
        self._need = 1
        if type(msg) is Checkpoint:
            self._start_checkpoint(msg.size)
        return msg
