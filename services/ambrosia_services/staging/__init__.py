"""Staged segments: received message bytes on disk, referenced (never carried) by an
immortal's log and state. See ``segments`` for the format and its guarantees."""

from .reading import read_block, read_payloads, segment_names
from .segments import (
    MAGIC,
    Block,
    Ref,
    SegmentDamagedError,
    SegmentMissingError,
    SegmentWriter,
    StagingError,
    StagingFullError,
    count_lines,
    encode_block,
)

__all__ = [
    "MAGIC",
    "Block",
    "Ref",
    "SegmentDamagedError",
    "SegmentMissingError",
    "SegmentWriter",
    "StagingError",
    "StagingFullError",
    "count_lines",
    "encode_block",
    "read_block",
    "read_payloads",
    "segment_names",
]
