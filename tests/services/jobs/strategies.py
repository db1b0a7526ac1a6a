"""Every Hypothesis strategy of the job protocol tests, in one place."""

from __future__ import annotations

import itertools
from typing import Any

import msgpack
from ambrosia_services.jobs import (
    Batch,
    Cancel,
    Check,
    CheckResponse,
    FlowControl,
    JobId,
    JobMessage,
    Start,
    encode,
)
from hypothesis import strategies as st

from .helpers import INITIATOR, P1, P2

u32s = st.integers(0, 2**32 - 1)
u64s = st.integers(0, 2**64 - 1)
i32s = st.integers(-(2**31), 2**31 - 1)
# A few members, so that ids repeat across messages as they do in real traffic.
members = st.one_of(st.uuids(), st.sampled_from([INITIATOR, P1, P2]))
job_ids = st.builds(JobId, members, st.one_of(st.integers(0, 5), u64s))
short_text = st.text(max_size=20)

plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    st.binary(max_size=10),
)
plain_values = st.recursive(
    plain_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)
params: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.text(max_size=8), plain_values, max_size=5
)

starts = st.builds(
    Start,
    job_ids,
    st.text(min_size=1, max_size=20),
    params,
    st.lists(st.uuids(), min_size=1, max_size=5, unique=True),
)
cancels = st.builds(Cancel, job_ids, members, i32s, short_text)
batches = st.builds(Batch, job_ids, u32s, u64s, st.binary(max_size=64), st.booleans())
flow_controls = st.builds(FlowControl, job_ids, u32s, st.integers(1, 2**64 - 1))
checks = st.builds(Check, st.lists(job_ids, max_size=6, unique=True))


@st.composite
def check_responses(draw: st.DrawFn) -> CheckResponse:
    ids = draw(st.lists(job_ids, max_size=6, unique=True))
    cut = draw(st.integers(0, len(ids)))
    return CheckResponse(ids[:cut], ids[cut:])


messages: st.SearchStrategy[JobMessage] = st.one_of(
    starts, cancels, batches, flow_controls, checks, check_responses()
)


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at arbitrary points (empty pieces included)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, inserted, deleted, or the tail cut."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, len(buf)))
        if op == "flip" and pos < len(buf):
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and pos < len(buf):
            del buf[pos : pos + draw(st.integers(1, 4))]
        elif op == "truncate":
            del buf[pos:]
    return bytes(buf)


@st.composite
def mutated_bodies(draw: st.DrawFn, msgs: list[JobMessage]) -> bytes:
    """Each message's frame with its body mutated and its length prefix made to match, so
    the damage reaches the body decoders instead of stopping at the framing."""
    out = bytearray()
    for msg in msgs:
        frame = encode(msg)
        body = frame[4:]
        if draw(st.booleans()):
            body = body[:1] + draw(mutated(body[1:]))
        out += len(body).to_bytes(4, "big") + body
    return bytes(out)


# ------------------------------------------------------------------ raw frames
# Frames built field by field from the README's layout, with values at and past the edges
# of what each field allows (zero credits, repeated ids, empty names, bad UTF-8, params that
# are not a map, counts that disagree with the bytes). Random byte flips rarely make such
# values; these make them often, so every constructor's refusal is reached.

_pool_ids = st.sampled_from([
    bytes.fromhex("00112233445566778899AABBCCDDEEFF") + i.to_bytes(8, "big") for i in range(3)
])
_pool_members = st.sampled_from([INITIATOR.bytes, P1.bytes])
_raw_text = st.one_of(
    st.text(max_size=4).map(lambda t: t.encode()),
    st.binary(max_size=4),  # often not UTF-8
).map(lambda b: len(b).to_bytes(2, "big") + b)
_raw_params = st.one_of(
    params.map(lambda p: msgpack.packb(p, use_bin_type=True)),
    plain_values.map(lambda v: msgpack.packb(v, use_bin_type=True)),  # often not a map
    st.just(b"\x81\x01\x02"),  # an int key
    st.just(b"\x81\xc0\x02"),  # a nil key
    st.binary(max_size=12),
)


def _u(n: int, size: int) -> bytes:
    return n.to_bytes(size, "big")


@st.composite
def _count_and(draw: st.DrawFn, item: st.SearchStrategy[bytes], width: int) -> bytes:
    items = draw(st.lists(item, max_size=3))
    n = len(items) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    return _u(max(n, 0), width) + b"".join(items)


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    """A type byte and a body, usually close to valid."""
    kind = draw(st.integers(0, 7))
    job = draw(_pool_ids)
    tail = draw(st.sampled_from([b"", b"", b"", b"\x00"]))
    if kind == 1:
        body = (job + draw(_count_and(_pool_members, 2)) + draw(_raw_text)
                + draw(_raw_params))
    elif kind == 2:
        body = (job + draw(_pool_members) + _u(draw(st.integers(0, 2**32 - 1)), 4)
                + draw(_raw_text) + tail)
    elif kind == 3:
        body = (job + _u(draw(u32s), 4) + _u(draw(u64s), 8)
                + bytes([draw(st.sampled_from([0, 1, 2, 3, 0x80]))]) + draw(st.binary(max_size=8)))
    elif kind == 4:
        credits = draw(st.sampled_from([0, 1, 2**64 - 1]) | u64s)
        body = job + _u(draw(u32s), 4) + _u(credits, 8) + tail
    elif kind in (5, 6):
        body = draw(_count_and(_pool_ids, 4))
        if kind == 6:
            body += draw(_count_and(_pool_ids, 4))
        body += tail
    else:
        body = draw(st.binary(max_size=40))
    return bytes([kind]) + body


raw_frames = raw_bodies().map(lambda b: len(b).to_bytes(4, "big") + b)
