"""Members, job ids and feeding helpers shared by the job protocol tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from ambrosia_services.jobs import NEED_DATA, FrameDecoder, JobConnection, JobId, JobMessage

# Member ids chosen so that their 16 bytes are easy to read in a hex dump.
INITIATOR = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
P1 = uuid.UUID("01010101-0101-0101-0101-010101010101")
P2 = uuid.UUID("02020202-0202-0202-0202-020202020202")
OTHER = uuid.UUID("0f0f0f0f-0f0f-0f0f-0f0f-0f0f0f0f0f0f")

I_HEX = "00112233 44556677 8899AABB CCDDEEFF"
P1_HEX = "01010101 01010101 01010101 01010101"
P2_HEX = "02020202 02020202 02020202 02020202"
OTHER_HEX = "0F0F0F0F 0F0F0F0F 0F0F0F0F 0F0F0F0F"

JOB = JobId(INITIATOR, 7)
JOB_HEX = I_HEX + " 00000000 00000007"


def h(text: str) -> bytes:
    """Hex with any whitespace, as golden bytes are written."""
    return bytes.fromhex(text)


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def decode_all(pieces: Iterable[bytes], max_frame_size: int | None = None) -> list[JobMessage]:
    """Feed ``pieces`` one after another into a fresh decoder, draining after each."""
    decoder = FrameDecoder() if max_frame_size is None else FrameDecoder(max_frame_size)
    out: list[JobMessage] = []
    for piece in pieces:
        decoder.receive_data(piece)
        while (msg := decoder.next_message()) is not NEED_DATA:
            out.append(msg)  # type: ignore[arg-type]
    assert decoder.buffered == 0
    return out


def receive_all(conn: JobConnection, pieces: Iterable[bytes]) -> list[JobMessage]:
    """Feed ``pieces`` into a connection, collecting every message it hands out."""
    out: list[JobMessage] = []
    for piece in pieces:
        conn.receive_data(piece)
        out.extend(conn.events())
    return out
