"""Binding -> coordinator: the incremental decoder of a bare message stream."""

from __future__ import annotations

from ..errors import FrameTooLargeError, RemoteProtocolError, WireFormatError
from .buffering import (
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    Buffered,
    CheckpointChunk,
    CheckpointEnd,
    NeedData,
    StreamEvent,
    located,
)
from .fastpaths import outgoing_rpcs
from .messages import Checkpoint, Direction, Message, OutgoingRpc, decode_body
from .varint import Incomplete, decode_zz32

__all__ = ["MessageStreamDecoder"]

_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__


class MessageStreamDecoder(Buffered):
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
            # Anything else (or anything odd about this one) takes ``outgoing_rpcs`` and
            # then the general path below. Kept inline: two ``decode_zz32`` calls (size,
            # method id) cost this path about a third of its speed.
            # Must agree with varint.decode_zz32 (tests/wire/test_fast_paths.py checks).
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
            self._fail(located(err, self._base + pos, None))
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
