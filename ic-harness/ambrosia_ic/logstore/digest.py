"""Replay digests: ``serverdigest<N>`` holds, per binding output since checkpoint N, the
XXH64 of the output message and the sequence id last delivered when it came."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ambrosia_core.wire import OutgoingRpc, RpcType

__all__ = ["DIGEST_ENTRY", "DigestWriter", "is_impulse", "read_digest"]

DIGEST_ENTRY = struct.Struct("<Qq")
_IMPULSE = int(RpcType.IMPULSE)
_pack = DIGEST_ENTRY.pack


def is_impulse(rpc: OutgoingRpc) -> bool:
    """Whether an output is an Impulse: it comes from the outside world, not from the
    logged inputs, so a replay does not regenerate it and the digest leaves it out."""
    return rpc.reserved == 0 and rpc.rpc_type == _IMPULSE


def read_digest(path: Path) -> list[tuple[int, int]]:
    """``(output hash, seq id)`` entries of a digest file; a torn final entry is ignored."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % DIGEST_ENTRY.size
    return [(int(h), int(s)) for h, s in DIGEST_ENTRY.iter_unpack(data[:whole])]


class DigestWriter:
    """Appends digest entries with plain writes: they survive the process being killed
    (the page cache keeps them). A power cut may cost the entries of the log being
    written; the next recovery starts from that log's checkpoint and writes them again as
    it replays. Once the log ends (a checkpoint starts the next one, or a stop), ``close``
    syncs the digest: no recovery comes back to it.

    ``add`` buffers; ``flush`` writes what was added in one call. The coordinator flushes
    after each read from its binding, before any output of that read leaves the process.
    """

    def __init__(self, path: Path, keep: int | None = None) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        if keep is not None:
            os.ftruncate(self._fd, keep * DIGEST_ENTRY.size)
        os.lseek(self._fd, 0, os.SEEK_END)
        self._pending = bytearray()

    def add(self, output_hash: int, seq_id: int) -> None:
        self._pending += _pack(output_hash, seq_id)

    def add_run(self, output_hashes: list[int], seq_id: int) -> None:
        """``add`` each of ``output_hashes``, all with ``seq_id``."""
        self._pending += b"".join([_pack(h, seq_id) for h in output_hashes])

    def flush(self) -> None:
        if self._pending:
            view = memoryview(self._pending)
            while view:
                view = view[os.write(self._fd, view):]
            view.release()
            self._pending.clear()

    def close(self) -> None:
        """Flush and sync: a closed digest describes a log that ended (at a checkpoint or
        a stop), which no recovery replays into it again, so a power cut must not cut it
        short (the time-travel check would call the replay divergent)."""
        if self._fd >= 0:
            try:
                self.flush()
                os.fdatasync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1
