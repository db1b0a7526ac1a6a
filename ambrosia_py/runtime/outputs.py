"""What ``Engine.next_output`` hands its driver: bytes to write to the coordinator's
receive port, or a checkpoint to stream there. The driver (the runner over sockets, or
the in-memory coordinator in tests) only moves these bytes; every rule about what may be
sent when stays in the engine and its ``BindingConnection``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import IO

from ..protocol import BindingConnection
from ..protocol import events as ev

__all__ = ["CHECKPOINT_CHUNK", "Output", "SendBytes", "SendCheckpoint"]

CHECKPOINT_CHUNK = 1 << 20  # default size of the checkpoint's data messages


class SendBytes:
    """Write ``data`` to the coordinator (RPC batches, the InitialMessage, requests)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"SendBytes({len(self.data)} bytes)"


class SendCheckpoint:
    """A checkpoint to stream: write every item of ``chunks()`` before asking the engine
    for its next output (the connection refuses anything else until the last byte).

    Attributes:
        size: the checkpoint's size in bytes.
        reason: why the coordinator asked for it.
        done: True once every chunk was handed out (or the stream was abandoned).
    """

    __slots__ = ("_conn", "_file", "_log", "done", "reason", "size")

    def __init__(self, conn: BindingConnection, file: IO[bytes], size: int,
                 reason: ev.CheckpointReason, log: logging.Logger) -> None:
        self._conn = conn
        self._file = file
        self._log = log
        self.size = size
        self.reason = reason
        self.done = False

    def __repr__(self) -> str:
        return f"SendCheckpoint({self.size} bytes, {self.reason.value})"

    def chunks(self, chunk_size: int = CHECKPOINT_CHUNK) -> Iterator[bytes]:
        """The checkpoint's messages, encoded: the size, then data of ``chunk_size``."""
        try:
            yield self._conn.begin_checkpoint(self.size)
            while chunk := self._file.read(chunk_size):
                yield self._conn.checkpoint_data(chunk)
            self._log.info("checkpoint of %d bytes sent (%s)", self.size, self.reason.value)
        finally:
            self._file.close()
            self.done = True


Output = SendBytes | SendCheckpoint
