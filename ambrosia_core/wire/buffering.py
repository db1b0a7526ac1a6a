"""What both stream decoders share: bounded buffering, checkpoint pass-through, the events.

Both decoders follow one pattern: ``receive_data(bytes)`` buffers, ``next_event()``
returns the next event or ``NEED_DATA``. ``Buffered`` holds the input and streams the raw
bytes of a checkpoint out as ``CheckpointChunk`` events; each decoder parses its frames.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, NamedTuple

from ..errors import FrameTooLargeError, RemoteProtocolError
from .messages import Message
from .records import HEADER_SIZE, LogRecord

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "Buffered",
    "CheckpointChunk",
    "CheckpointEnd",
    "NeedData",
    "StreamEvent",
    "located",
]

DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024


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


def located(
    err: RemoteProtocolError, offset: int | None, seq_id: int | None
) -> RemoteProtocolError:
    """The same error, told where in the stream (and in which record) it happened."""
    return type(err)(err.reason, offset=offset, seq_id=seq_id, message_type=err.message_type)


class Buffered:
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
