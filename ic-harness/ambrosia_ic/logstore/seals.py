"""Active/active seals: ``serverseal<N>`` holds where log N ends for everyone."""

from __future__ import annotations

import struct
from pathlib import Path

from ambrosia_core.durable import replace_durably
from ambrosia_ic.errors import LogCorruptionError

from .layout import seal_path

__all__ = ["read_seal", "write_seal"]

_I64 = struct.Struct("<q")


def read_seal(d: Path, n: int) -> int | None:
    """Where log ``n`` ends for everyone, if an active/active takeover sealed it."""
    try:
        data = seal_path(d, n).read_bytes()
    except FileNotFoundError:
        return None
    if len(data) != 8:
        raise LogCorruptionError(str(seal_path(d, n)), 0, f"a seal of {len(data)} bytes")
    return int(_I64.unpack(data)[0])


def write_seal(d: Path, n: int, offset: int) -> None:
    """Seal log ``n`` at ``offset`` (durably, by rename): bytes after it never count,
    whoever writes them."""
    replace_durably(seal_path(d, n), _I64.pack(offset))
