"""What the binding streams, as the coordinator's core reads it, without I/O.

Its bytes (``BindingStream``): runs of plain RPC frames take the bytes path
(``frames.outgoing_frames``, no message objects); from the first frame that is anything
else until the decoder is back at a frame boundary, the stream goes through the decoder,
message by message. A checkpoint asked of it (``CheckpointStream``): its Checkpoint
message, its chunks and their end, in that order only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ambrosia_core.errors import RemoteProtocolError, UnexpectedMessageError
from ambrosia_core.wire import Incomplete, MessageStreamDecoder, decode_zz32

from .core_actions import CheckpointData, CheckpointReceived, Position
from .frames import OutgoingFrame, batch_frames, outgoing_frames

__all__ = ["BindingStream", "CheckpointStream"]

# A partial frame at the end of a read is kept for the bytes path up to this size; a
# bigger one (a large call or checkpoint) goes to the decoder, which joins its chunks once.
_KEEP_PARTIAL = 1 << 20


class BindingStream:
    """Cuts what a binding sends into runs of its outputs (``route_frames`` takes each
    run, as bytes) and its other messages (``on_message`` takes each, decoded)."""

    def __init__(self, route_frames: Callable[[list[OutgoingFrame]], None],
                 on_message: Callable[[Any], None]) -> None:
        self._route_frames = route_frames
        self._on_message = on_message
        self._decoder = MessageStreamDecoder()
        self._limit = self._decoder.max_frame_size
        self._names: dict[bytes, str] = {}
        self._rest = b""

    def receive(self, data: bytes) -> None:
        """Bytes read from the binding, in order.

        Raises:
            RemoteProtocolError: malformed bytes.
            UnexpectedMessageError: ``on_message`` refused a message.
        """
        decoder = self._decoder
        if decoder.at_boundary:
            buf = self._rest + data if self._rest else data
            limit, names = self._limit, self._names
            got, pos = outgoing_frames(buf, 0, limit, names)
            while True:
                self._route_frames(got)
                if pos >= len(buf) or (batch := batch_frames(buf, pos, limit, names)) is None:
                    break
                got, pos = batch
                more, pos = outgoing_frames(buf, pos, limit, names)
                got += more
            self._rest = buf[pos:]
            if self._rest and not _partial(self._rest, limit):
                decoder.receive_data(self._rest)
                self._rest = b""
        else:
            decoder.receive_data(data)
        if not decoder.at_boundary:
            for ev in decoder.drain():
                self._on_message(ev)


class CheckpointStream:
    """The checkpoint asked of the binding, as it streams back: ``ask``, then its
    Checkpoint message (``begin``), its chunks (``chunk``) and their end (``end``).

    Raises (each step out of turn):
        UnexpectedMessageError: a Checkpoint not asked for (or before the InitialMessage
            of a first start), a chunk or an end outside a checkpoint.
    """

    def __init__(self) -> None:
        self.expected: int | None = None  # the checkpoint asked for and not yet received
        self._position: Position = (0, {})  # the log's when it was asked for
        self._parts: CheckpointData | None = None

    def ask(self, n: int, position: Position) -> None:
        self.expected = n
        self._position = position

    def begin(self, message: bytes, outputs: Callable[[], dict[str, Any]],
              awaiting_initial: bool) -> int:
        """The Checkpoint message came: returns the checkpoint's number. ``outputs`` gives
        the snapshot of unacknowledged outputs stored with it, taken now."""
        n = self.expected
        if n is None or self._parts is not None:
            raise UnexpectedMessageError("a Checkpoint the coordinator did not ask for")
        if awaiting_initial:
            raise UnexpectedMessageError("a Checkpoint before the InitialMessage")
        self._parts = (message, [], outputs())
        return n

    def chunk(self, data: bytes) -> None:
        if self._parts is None:
            raise UnexpectedMessageError("a checkpoint chunk outside a checkpoint")
        self._parts[1].append(data)

    def end(self) -> CheckpointReceived:
        parts, n = self._parts, self.expected
        if parts is None or n is None:
            raise UnexpectedMessageError("a checkpoint's end outside a checkpoint")
        self._parts = self.expected = None
        return CheckpointReceived(n, parts, self._position)


def _partial(rest: bytes, limit: int) -> bool:
    """Whether ``rest`` is the start of a frame of at most ``_KEEP_PARTIAL`` bytes that
    the next read may complete (anything else goes to the decoder)."""
    try:
        size, body = decode_zz32(rest, 0)
    except Incomplete:
        return len(rest) < 5
    except RemoteProtocolError:
        return False
    return 0 < size <= min(limit, _KEEP_PARTIAL) and body + size > len(rest)
