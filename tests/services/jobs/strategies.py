"""Every Hypothesis strategy of the job protocol tests, in one place."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from services.jobs import (
    Batch,
    Cancel,
    Check,
    CheckResponse,
    FlowControl,
    JobId,
    JobMessage,
    Start,
)

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
