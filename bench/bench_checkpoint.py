"""Checkpoint write and load speed for immortal states of 1 MB to 1 GB.

Write: the framework serializes an immortal whose state is one ``bytes`` field of the
given size (``Engine.write_checkpoint``, into a spooled temporary file), and the
coordinator's ``write_checkpoint`` stores it durably in 1 MiB chunks, as it does with the
chunks a binding streams (temporary file, fsync, rename, fsync the directory). Load: the
coordinator reads the checkpoint file back in chunks (``CheckpointFile.chunks``) and the
framework restores the state from them (``Engine`` loading a checkpoint); the loaded
state must equal the written one.

Baseline, in the same run: writing the same number of bytes to a file with one fsync,
and reading them back. The sockets between coordinator and binding are left out; the
throughput benchmark covers them. Quick mode stops at 64 MB; full mode goes to 1 GB.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ambrosia_py import Immortal, SerializationError

MB = 1 << 20


class Blob(Immortal):
    def __init__(self) -> None:
        self.data = b""
        self.note = "blob"


def _engine() -> Any:
    from ambrosia_py.runtime.engine import Engine

    eng = Engine(Blob, "bench-blob", logger=logging.getLogger("bench.checkpoint"))
    eng.instance = eng._attach(Blob())
    return eng


def checkpoint_round(size: int, d: Path) -> tuple[float, float]:
    """(write seconds, load seconds) of one checkpoint of a ``size``-byte state."""
    from ambrosia_ic import logstore

    from ambrosia_core.wire import Checkpoint

    writer = _engine()
    data = os.urandom(1 << 16) * (size >> 16)
    writer.instance.data = data
    t0 = time.perf_counter()
    f, nbytes = writer.write_checkpoint()
    try:
        chunks = iter(lambda: f.read(MB), b"")
        path = logstore.write_checkpoint(d, 1, {"format": 1}, Checkpoint(nbytes).encode(),
                                         chunks)
    finally:
        f.close()
    t1 = time.perf_counter()
    reader = _engine()
    cf = logstore.CheckpointFile(path)
    with tempfile.SpooledTemporaryFile(max_size=8 * MB) as spool:
        for chunk in cf.chunks():
            spool.write(chunk)
        spool.seek(0)
        reader._load_checkpoint(spool)
    t2 = time.perf_counter()
    if reader.instance.data != data or reader.instance.note != "blob":
        raise RuntimeError(f"the loaded state of {size} bytes differs from the written one")
    return t1 - t0, t2 - t1


def file_round(size: int, d: Path) -> tuple[float, float]:
    """(write seconds, read seconds) of the same bytes in a plain file with one fsync."""
    block = os.urandom(1 << 16) * 16
    path = d / "plain"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = size
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    t1 = time.perf_counter()
    got = 0
    with open(path, "rb") as f:
        while chunk := f.read(MB):
            got += len(chunk)
    t2 = time.perf_counter()
    if got != size:
        raise RuntimeError(f"read back {got} of {size} bytes")
    path.unlink()
    return t1 - t0, t2 - t1


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def run(quick: bool) -> list[dict[str, Any]]:
    sizes = [1 * MB, 16 * MB, 64 * MB] if quick else [1 * MB, 16 * MB, 64 * MB, 256 * MB, 1024 * MB]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-", dir=os.environ.get("TMPDIR")) as t:
        d = Path(t)
        for size in sizes:
            repeats = 3 if size <= 128 * MB else 1
            w, r, bw, br = [], [], [], []
            failure = ""
            for _ in range(repeats):
                a, b = file_round(size, d)
                bw.append(size / MB / a)
                br.append(size / MB / b)
                try:
                    a, b = checkpoint_round(size, d)
                except SerializationError as e:  # reported in the table, not hidden
                    failure = f"load failed: {e}"
                    continue
                w.append(size / MB / a)
                r.append(size / MB / b)
            label = f"{size // MB} MB" if size < 1024 * MB else f"{size // (1024 * MB)} GB"
            extra = {"bytes": size, "repeats": repeats, "quick": quick}
            if failure:
                rows.append({"name": f"checkpoint write+load {label}: FAILED", "value": None,
                             "unit": "MB/s", "baseline": statistics.median(bw), "ratio": None,
                             "spread": 0.0, "extra": {**extra, "error": failure}})
                continue
            for name, values, base in ((f"checkpoint write {label} (vs file write+fsync)", w,
                                        bw),
                                       (f"checkpoint load {label} (vs file read)", r, br)):
                value, baseline = statistics.median(values), statistics.median(base)
                rows.append({"name": name, "value": value, "unit": "MB/s",
                             "baseline": baseline, "ratio": value / baseline,
                             "spread": _spread(values), "extra": extra})
    return rows
