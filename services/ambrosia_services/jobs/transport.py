"""What a job link's TCP connection carries before the job protocol: a hello each way.

The job protocol has no handshake: which member is at the other end is the transport's
knowledge (README, "Which message travels where"), and the starting credit of a stream is
left to the implementation (section 3.4.2: "sender and receiver agree on the initial
number of credits"). Our transport settles both in one step: each side first writes 36
bytes, ``b"AMBJOB02"``, its 16-byte member uuid, the byte credit it offers every stream
(U64) and the largest batch it takes (U32), all big-endian, and reads the other's. Both
ends then use the smaller credit and the smaller batch (never above that credit), so the
two ends of a connection hold the same terms by construction. Anything else is a
``HelloError`` and the connection is closed. The hello also stops a client of another
service, or of another version (``AMBJOB01`` carried no terms), before any frame is parsed.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Final

import attrs

from ambrosia_core.loops import write_unless_closing

from .connection import DEFAULT_BATCH_BYTES, DEFAULT_INITIAL_CREDITS
from .errors import HelloError
from .messages import MAX_U64

__all__ = ["HELLO_MAGIC", "HELLO_SIZE", "Hello", "LinkTerms", "agree", "exchange_hello",
           "parse_hello"]

HELLO_MAGIC: Final = b"AMBJOB02"
_HELLO: Final = struct.Struct(">8s16sQI")
HELLO_SIZE: Final = _HELLO.size
MAX_BATCH_BYTES: Final = 2**32 - 1


@attrs.frozen
class Hello:
    """One side's hello: who it is and the terms it offers."""

    member: uuid.UUID
    credits: int = attrs.field(default=DEFAULT_INITIAL_CREDITS)
    batch_bytes: int = attrs.field(default=DEFAULT_BATCH_BYTES)

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.credits <= MAX_U64:
            raise ValueError(f"a hello's credits must be 1..2**64-1, not {self.credits}")
        if not 1 <= self.batch_bytes <= MAX_BATCH_BYTES:
            raise ValueError(f"a hello's batch bytes must be 1..2**32-1, not {self.batch_bytes}")

    def encode(self) -> bytes:
        return _HELLO.pack(HELLO_MAGIC, self.member.bytes, self.credits, self.batch_bytes)


@attrs.frozen
class LinkTerms:
    """What both ends of one connection agreed: the peer, every stream's starting credit
    and the largest batch either end sends."""

    peer: uuid.UUID
    credits: int
    batch_bytes: int


def agree(ours: Hello, theirs: Hello) -> LinkTerms:
    """The terms both ends derive from the two hellos (the same at each end)."""
    credits = min(ours.credits, theirs.credits)
    return LinkTerms(theirs.member, credits, min(ours.batch_bytes, theirs.batch_bytes, credits))


def parse_hello(data: bytes) -> Hello:
    """The peer's hello from its 36 bytes.

    Raises:
        HelloError: the bytes do not start with the magic (another service or version),
            or offer no credit or an empty batch.
    """
    if len(data) != HELLO_SIZE or data[: len(HELLO_MAGIC)] != HELLO_MAGIC:
        raise HelloError(
            f"not a job link hello: {data[: len(HELLO_MAGIC)]!r} instead of {HELLO_MAGIC!r}"
        )
    _, member, credits, batch_bytes = _HELLO.unpack(data)
    if credits == 0 or batch_bytes == 0:
        raise HelloError(f"a job link hello offering {credits} credits and batches of "
                         f"{batch_bytes} bytes: both must be at least 1")
    return Hello(uuid.UUID(bytes=member), credits, batch_bytes)


async def exchange_hello(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ours: Hello,
    timeout: float = 10.0,
) -> LinkTerms:
    """Send our hello, read the peer's; returns the peer and the terms agreed.

    Raises:
        HelloError: bad hello bytes, or the peer closed or stayed silent first.
    """
    write_unless_closing(writer, ours.encode())
    try:
        await writer.drain()
        data = await asyncio.wait_for(reader.readexactly(HELLO_SIZE), timeout)
    except asyncio.IncompleteReadError as err:
        raise HelloError(f"the peer closed after {len(err.partial)} hello bytes") from None
    except TimeoutError:
        raise HelloError(f"no hello from the peer within {timeout:.0f} s") from None
    return agree(ours, parse_hello(data))
