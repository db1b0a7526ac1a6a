"""What a job link's TCP connection carries before the job protocol: a hello each way.

The job protocol has no handshake: which member is at the other end is the transport's
knowledge (README, "Which message travels where"). Our transport learns it in one step:
each side first writes 24 bytes, ``b"AMBJOB01"`` then its 16-byte member uuid, and reads
the other's. Anything else is a ``HelloError`` and the connection is closed. The hello also
stops a client of another service, or of another version, before any frame is parsed.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Final

from ambrosia_core.loops import write_unless_closing

from .errors import HelloError

__all__ = ["HELLO_MAGIC", "HELLO_SIZE", "exchange_hello", "hello", "parse_hello"]

HELLO_MAGIC: Final = b"AMBJOB01"
HELLO_SIZE: Final = len(HELLO_MAGIC) + 16


def hello(member: uuid.UUID) -> bytes:
    return HELLO_MAGIC + member.bytes


def parse_hello(data: bytes) -> uuid.UUID:
    """The peer's member id from its 24 hello bytes.

    Raises:
        HelloError: the bytes do not start with the magic (another service or version).
    """
    if len(data) != HELLO_SIZE or data[: len(HELLO_MAGIC)] != HELLO_MAGIC:
        raise HelloError(
            f"not a job link hello: {data[: len(HELLO_MAGIC)]!r} instead of {HELLO_MAGIC!r}"
        )
    return uuid.UUID(bytes=data[len(HELLO_MAGIC) :])


async def exchange_hello(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    member: uuid.UUID,
    timeout: float = 10.0,
) -> uuid.UUID:
    """Send our hello, read the peer's; returns the peer's member id.

    Raises:
        HelloError: bad hello bytes, or the peer closed or stayed silent first.
    """
    write_unless_closing(writer, hello(member))
    try:
        await writer.drain()
        data = await asyncio.wait_for(reader.readexactly(HELLO_SIZE), timeout)
    except asyncio.IncompleteReadError as err:
        raise HelloError(f"the peer closed after {len(err.partial)} hello bytes") from None
    except TimeoutError:
        raise HelloError(f"no hello from the peer within {timeout:.0f} s") from None
    return parse_hello(data)
