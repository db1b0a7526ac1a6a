"""``FrameReader``: cuts an incoming byte stream into whole frames, sans-IO.

Input may be split at any byte. A length over the bound is rejected as soon as its four
bytes arrive, so a peer cannot make the buffer grow without bound; the frames before it
are still returned. Each ``RawFrame`` (offset, tag, body) goes to ``decode_frame``.
"""

from __future__ import annotations

from typing import Final

import attrs

from ambrosia_core.wire import NEED_DATA, NeedData

from .errors import FrameFormatError, FrameTooLargeError
from .fields import U32, U32_MAX

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameReader", "RawFrame"]

DEFAULT_MAX_FRAME_SIZE: Final = 4 * 1024 * 1024


@attrs.frozen
class RawFrame:
    """One whole frame cut from the stream: where it began, its tag and its body."""

    offset: int
    tag: int
    body: bytes


class FrameReader:
    """Cuts a byte stream into frames, whatever the input's split.

    ``receive_data`` buffers; ``next_frame`` returns a ``RawFrame`` or ``NEED_DATA``. A
    length over ``max_frame_size`` is refused as soon as its four bytes have arrived:
    the frames before it are still returned, then ``next_frame`` raises
    ``FrameTooLargeError``, and nothing after that length is kept. After an error every
    call raises it again.

    Args:
        max_frame_size: the largest length field accepted (it counts tag and body).
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not 1 <= max_frame_size <= U32_MAX:
            raise ValueError(f"max_frame_size must be in [1, {U32_MAX}], got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # start of the next frame in _buf
        self._base = 0  # stream offset of _buf[0]
        self._scanned = 0  # index in _buf of the first frame length not yet checked
        self._poison: FrameTooLargeError | None = None  # an oversized length, not yet raised
        self._error: FrameFormatError | None = None

    @property
    def offset(self) -> int:
        """Stream offset of the next frame to return."""
        return self._base + self._pos

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    @property
    def at_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean place for the stream to end)."""
        return self.buffered == 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the peer; bytes after an oversized length are dropped."""
        if self._error is not None:
            raise self._error
        if self._poison is not None or not data:
            return
        if self._pos and self._pos * 2 >= len(self._buf):
            # Drop what was consumed once it is at least half the buffer: each byte is
            # moved a bounded number of times, however the input is split.
            del self._buf[: self._pos]
            self._base += self._pos
            self._scanned -= self._pos
            self._pos = 0
        self._buf += data
        self._check_lengths()

    def _check_lengths(self) -> None:
        """Check each frame length that has fully arrived, so that an oversized frame is
        refused before its body is buffered."""
        buf = self._buf
        pos = self._scanned
        while pos + 4 <= len(buf):
            (length,) = U32.unpack_from(buf, pos)
            if length > self.max_frame_size:
                self._poison = FrameTooLargeError(
                    f"frame of {length} bytes is over the {self.max_frame_size}-byte limit",
                    offset=self._base + pos,
                )
                del buf[pos + 4 :]
                break
            pos += 4 + length
        self._scanned = pos

    def next_frame(self) -> RawFrame | NeedData:
        """The next whole frame, or ``NEED_DATA``.

        Raises:
            FrameTooLargeError: the next frame's length is over the limit.
            FrameFormatError: the next frame's length is zero (no room for a tag).
        """
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return NEED_DATA
        (length,) = U32.unpack_from(buf, pos)
        if length > self.max_frame_size and self._poison is not None:
            self._fail(self._poison)
        if length == 0:
            self._fail(
                FrameFormatError("frame length 0 leaves no room for a tag", offset=self.offset)
            )
        end = pos + 4 + length
        if len(buf) < end:
            return NEED_DATA
        frame = RawFrame(self._base + pos, buf[pos + 4], bytes(buf[pos + 5 : end]))
        self._pos = end
        return frame

    def _fail(self, err: FrameFormatError) -> None:
        self._error = err
        self._buf.clear()
        self._pos = 0
        raise err
