"""Incremental (sans-IO) decoders for the two directions of the binding's sockets.

Both follow one pattern: ``receive_data(bytes)`` buffers, ``next_event()`` returns the
next event or ``NEED_DATA``. Input may be split at any byte. Checkpoint bytes are passed
through as ``CheckpointChunk`` events as they arrive, so a checkpoint far larger than
memory never sits in a buffer; a ``CheckpointEnd`` closes it. Every buffer is bounded:
a frame that claims more than ``max_frame_size`` bytes is rejected before it is read.

After an error the decoder is broken: every later call raises the same error.

The shared buffering is in ``buffering``; the decoders in ``record_decoder`` (log records)
and ``message_decoder`` (a bare message stream). This module is the one import for them.
"""

from __future__ import annotations

from .buffering import (
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    CheckpointChunk,
    CheckpointEnd,
    NeedData,
    StreamEvent,
)
from .message_decoder import MessageStreamDecoder
from .record_decoder import LogRecordDecoder

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "CheckpointChunk",
    "CheckpointEnd",
    "LogRecordDecoder",
    "MessageStreamDecoder",
    "NeedData",
    "StreamEvent",
]
