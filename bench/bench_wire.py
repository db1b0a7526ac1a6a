"""Wire codec speed against a plain-Python framing loop over the same bytes.

The baseline reads a size varint, slices the frame and moves on: the least any decoder
of this format can do in pure Python. Each result is frames per second, and its ratio to
the baseline (1.0 would mean decoding costs nothing beyond framing).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ambrosia_core.wire import (
    NEED_DATA,
    LogRecordDecoder,
    MessageStreamDecoder,
    OutgoingRpc,
    encode_outgoing_rpc,
    encode_record,
    encode_rpc,
    fastpaths,
)

ARGS = b'{"k":"value-of-twenty-s"}'[:27].ljust(27, b" ")  # 27 bytes: a 33-byte frame
FEED = 64 * 1024  # bytes per receive_data, as a socket read would deliver them
PER_RECORD = 100


# The framework's own method ids are CRC-32 based (5-byte varints) and many calls carry
# more than 63 bytes (a two-byte size): the streams of such frames, beside the small ones.
BIG_ARGS = b"a" * 200
BIG_METHOD = 0x2F3C4D5E


def outgoing_frames(n: int) -> bytes:
    frame = encode_outgoing_rpc("", 7, 1, ARGS)
    assert len(frame) == 33, len(frame)
    return frame * n


def big_outgoing_frames(n: int) -> bytes:
    return encode_outgoing_rpc("", BIG_METHOD, 1, BIG_ARGS) * n


def record_stream(n_records: int, frame: bytes | None = None) -> bytes:
    body = (frame or encode_rpc(7, 1, ARGS + b"x")) * PER_RECORD  # 33-byte incoming frames
    return b"".join(encode_record(1, seq, body) for seq in range(n_records))


def baseline_framing(buf: bytes) -> int:
    """Read a one-byte-or-more size varint, slice the frame, advance."""
    pos = 0
    end = len(buf)
    count = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        if b < 0x80:
            size = b >> 1
        else:
            u = b & 0x7F
            shift = 7
            while True:
                b = buf[pos]
                pos += 1
                u |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            size = (u >> 1) ^ -(u & 1)
        _frame = buf[pos : pos + size]
        pos += size
        count += 1
    return count


def decode_messages_stream(buf: bytes) -> int:
    decoder = MessageStreamDecoder()
    count = 0
    for i in range(0, len(buf), FEED):
        decoder.receive_data(buf[i : i + FEED])
        next_event = decoder.next_event
        while next_event() is not NEED_DATA:
            count += 1
    return count


def drain_messages_stream(buf: bytes) -> int:
    decoder = MessageStreamDecoder()
    count = 0
    for i in range(0, len(buf), FEED):
        decoder.receive_data(buf[i : i + FEED])
        count += len(decoder.drain())
    return count


def decode_records_stream(buf: bytes) -> int:
    decoder = LogRecordDecoder()
    count = 0
    for i in range(0, len(buf), FEED):
        decoder.receive_data(buf[i : i + FEED])
        while (ev := decoder.next_event()) is not NEED_DATA:
            count += len(ev.messages)  # type: ignore[union-attr]
    return count


def encode_outgoing(n: int) -> int:
    for _ in range(n):
        encode_outgoing_rpc("", 7, 1, ARGS)
    return n


def encode_incoming(n: int) -> int:
    for _ in range(n):
        encode_rpc(7, 1, ARGS)
    return n


def encode_outgoing_named(n: int) -> int:
    rpc = OutgoingRpc("server", 7, 1, ARGS)
    for _ in range(n):
        rpc.encode()
    return n


def _timed(fn: Callable[[], int]) -> float:
    t0 = time.perf_counter()
    count = fn()
    return count / (time.perf_counter() - t0)


def _spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs)


def run(quick: bool) -> list[dict[str, Any]]:
    """Every case on the codec this process uses and, when that is the compiled one, again
    on the pure-Python one in a child process (``AMBROSIA_PY_CODEC=pure``), each row named
    with its codec."""
    rows = _run(quick)
    if fastpaths.CODEC == "compiled":
        env = dict(os.environ, AMBROSIA_PY_CODEC="pure")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent.parent),
                                                        env.get("PYTHONPATH", "")) if p)
        out = subprocess.run([sys.executable, __file__, "--json"] + (["--quick"] if quick else []),
                             env=env, capture_output=True, text=True, check=True).stdout
        rows += [r for r in json.loads(out) if r["name"] != rows[0]["name"]]
    return rows


def _run(quick: bool) -> list[dict[str, Any]]:
    codec = f" [{fastpaths.CODEC} codec]"
    n = 20_000 if quick else 200_000
    repeats = 3 if quick else 9
    frames = outgoing_frames(n)
    records = record_stream(n // PER_RECORD)
    record_frames_only = b"".join(
        records[i + 24 : i + 24 + 33 * PER_RECORD]
        for i in range(0, len(records), 24 + 33 * PER_RECORD)
    )
    assert baseline_framing(frames) == n == decode_messages_stream(frames)
    assert drain_messages_stream(frames) == n
    assert decode_records_stream(records) == n == baseline_framing(record_frames_only)
    big_frames = big_outgoing_frames(n)
    big_rpc = encode_rpc(BIG_METHOD, 1, BIG_ARGS)
    big_records = record_stream(n // PER_RECORD, big_rpc)
    big_record_frames = big_rpc * n
    assert decode_messages_stream(big_frames) == n == drain_messages_stream(big_frames)
    assert decode_records_stream(big_records) == n

    def baseline() -> int:
        return baseline_framing(frames)

    def big_baseline() -> int:
        return baseline_framing(big_frames)

    def big_record_baseline() -> int:
        return baseline_framing(big_record_frames)

    cases: list[tuple[str, Callable[[], int], Callable[[], int]]] = [
        ("MessageStreamDecoder.next_event, outgoing RPC",
         lambda: decode_messages_stream(frames), baseline),
        ("MessageStreamDecoder.drain, outgoing RPC", lambda: drain_messages_stream(frames),
         baseline),
        (f"LogRecordDecoder, {PER_RECORD} RPCs/record", lambda: decode_records_stream(records),
         baseline),
        ("MessageStreamDecoder.next_event, 210-byte RPC, 5-byte method id",
         lambda: decode_messages_stream(big_frames), big_baseline),
        ("MessageStreamDecoder.drain, 210-byte RPC, 5-byte method id",
         lambda: drain_messages_stream(big_frames), big_baseline),
        (f"LogRecordDecoder, {PER_RECORD} 210-byte RPCs/record, 5-byte method id",
         lambda: decode_records_stream(big_records), big_record_baseline),
        ("encode_outgoing_rpc (self-call)", lambda: encode_outgoing(n), baseline),
        ("encode_rpc", lambda: encode_incoming(n), baseline),
        ("OutgoingRpc.encode (named)", lambda: encode_outgoing_named(n), baseline),
    ]
    # Each repeat times the baseline right before the case and keeps their ratio, so that
    # load from other processes, which drifts over seconds, mostly cancels out.
    base_rates: list[float] = []
    rows = []
    for name, fn, base_fn in cases:
        rates, ratios, own_base = [], [], []
        for _ in range(repeats):
            b = _timed(base_fn)
            r = _timed(fn)
            if base_fn is baseline:
                base_rates.append(b)
            own_base.append(b)
            rates.append(r)
            ratios.append(r / b)
        rows.append((name, rates, ratios, own_base))
    base = statistics.median(base_rates)
    results = [{
        "name": "baseline: varint framing loop",
        "value": base, "unit": "frames/s", "baseline": base, "ratio": 1.0,
        "spread": _spread(base_rates),
    }]
    for name, rates, ratios, own_base in rows:
        results.append({
            "name": name + codec, "value": statistics.median(rates), "unit": "frames/s",
            "baseline": statistics.median(own_base), "ratio": statistics.median(ratios),
            "spread": _spread(ratios),
        })
    return results


if __name__ == "__main__":
    if "--json" in sys.argv:
        print(json.dumps(_run("--quick" in sys.argv)))
