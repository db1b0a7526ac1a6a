"""Hypothesis strategies for the connector protocol tests, in one place."""

from __future__ import annotations

from ambrosia_services.connectors import (
    Ack,
    EosMessage,
    ErrorFrame,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    OkCredit,
    OkSource,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Restart,
    TwoPCReply,
    Where,
    WorkersLeft,
)
from hypothesis import strategies as st

u32s = st.integers(0, 2**32 - 1)
# Mostly small ids (the common case), sometimes anywhere in the U64 range.
u64s = st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1))
i64s = st.integers(-(2**63), 2**63 - 1)
# Valid UTF-8 text: no lone surrogates.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
short_bytes = st.binary(max_size=24)
payloads = st.binary(max_size=64)

ok_credits = st.builds(OkCredit, u64s, texts, u64s)
ok_sources = st.builds(OkSource, texts, texts)

frames = st.one_of(
    st.builds(Hello, texts, short_bytes, texts, texts),
    st.builds(
        Ok,
        u32s,
        st.lists(ok_credits, max_size=3).map(tuple),
        st.lists(ok_sources, max_size=3).map(tuple),
    ),
    st.builds(ErrorFrame, texts),
    st.builds(Notify, u64s, texts, u64s),
    st.builds(NotifyAck, st.booleans(), u64s, u64s),
    st.builds(Message, u64s, u64s, payloads, i64s, short_bytes),
    st.builds(Ack, u32s, st.lists(st.tuples(u64s, u64s), max_size=4).map(tuple)),
    st.builds(Restart, texts),
    st.builds(EosMessage, u64s),
)

wheres = st.builds(Where, u64s, u64s, u64s)
names = st.lists(texts, max_size=4).map(tuple)
twopc_messages = st.one_of(
    st.builds(ListUncommitted, u64s),
    st.builds(ReplyUncommitted, u64s, names),
    st.builds(Phase1, texts, st.lists(wheres, max_size=3).map(tuple)),
    st.builds(TwoPCReply, texts, st.booleans()),
    st.builds(Phase2, texts, st.booleans()),
    st.builds(WorkersLeft, u64s, names),
)


@st.composite
def cuts(draw: st.DrawFn, length: int) -> list[int]:
    """Where to cut a byte string of ``length`` bytes into pieces."""
    if length <= 1:
        return []
    return sorted(draw(st.sets(st.integers(1, length - 1), max_size=min(length - 1, 20))))


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, inserted, deleted, or cut off at the end."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "set"]))
        if not out:
            out += draw(st.binary(min_size=1, max_size=4))
            continue
        i = draw(st.integers(0, len(out) - 1))
        if kind == "flip":
            out[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            out[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xC9, 0xCF, 0xFF]))
        elif kind == "insert":
            out[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del out[i : i + draw(st.integers(1, 8))]
        else:
            del out[i:]
    return bytes(out)


@st.composite
def framed_garbage(draw: st.DrawFn) -> bytes:
    """A frame with a correct length and a random tag and body, so that the random bytes
    reach the frame decoders (random lengths mostly stop at the frame bound)."""
    tag = draw(st.integers(0, 10))
    body = draw(st.binary(max_size=40))
    if tag == 5 and draw(st.booleans()):  # a MESSAGE on stream 0 with a random 2PC payload
        body = bytes(26) + bytes([draw(st.integers(199, 208))]) + body
    return (len(body) + 1).to_bytes(4, "big") + bytes([tag]) + body
