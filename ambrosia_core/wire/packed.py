"""Messages packed tightly behind each other, as in a log record's body.

Runs of incoming RPC calls (almost every record) go through the fast path in
``_fast``; every other message, and any call that is odd in any way, through
``messages.decode_body``, which also reports what is wrong.
"""

from __future__ import annotations

from ..errors import VarintError, WireFormatError
from .fastpaths import incoming_rpcs, long_zz32
from .messages import Direction, Message, decode_body, rebased
from .varint import Incomplete, decode_zz32

__all__ = ["decode_messages"]


def decode_messages(
    buf: bytes, start: int, end: int, direction: Direction, base: int = 0
) -> list[Message]:
    """Decode messages packed tightly in ``buf[start:end]`` (a log record's body).

    ``base`` is added to positions in error messages (the buffer's offset in its stream).

    Raises:
        WireFormatError: a message is malformed, illegal in ``direction``, overruns
            ``end``, or bytes are left over.
    """
    try:
        return _decode_messages(buf, start, end, direction, base)
    except VarintError as err:
        raise rebased(err, base) from None


def _decode_messages(
    buf: bytes, start: int, end: int, direction: Direction, base: int
) -> list[Message]:
    out: list[Message] = []
    append = out.append
    pos = start
    incoming = direction is not Direction.TO_COORDINATOR
    while pos < end:
        if incoming:
            pos = incoming_rpcs(buf, pos, end, append)
            if pos >= end:
                break
        b = buf[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            body = pos + 1
        else:
            sized = long_zz32(buf, pos, end)
            if sized is None:
                try:
                    size, body = decode_zz32(buf, pos)
                except Incomplete:
                    raise WireFormatError(
                        "record body ends inside a message size", offset=base + pos
                    ) from None
            else:
                size, body = sized
        msg_end = body + size
        if size < 1 or msg_end > end:
            raise WireFormatError(
                f"message size {size} does not fit the {end - pos} bytes left in the record",
                offset=base + pos,
            )
        append(decode_body(buf[body], buf, body + 1, msg_end, direction, base))
        pos = msg_end
    return out
