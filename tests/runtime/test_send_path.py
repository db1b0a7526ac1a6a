"""The send path's shortcuts against what they stand in for: the positional count check
against ``signature.bind``, the serializer's pass-through against its converter, and a
whole burst of forks against the bytes ``send_rpcs`` makes of the same calls."""

from __future__ import annotations

import inspect
import logging
import types
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_core.wire import MessageStreamDecoder, OutgoingRpc, RpcBatch, RpcType
from ambrosia_core.wire.encoders import outgoing_rpc_head, sized
from ambrosia_py import Immortal, fork, rpc
from ambrosia_py import serialization as ser
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.runtime.sending import positional_counts
from ambrosia_py.testing.inmemory import InMemoryCoordinator


def _a(self, x): ...
def _b(self, x, y=1, /): ...
def _c(self, x, *rest): ...
def _d(self, x, *, k): ...
def _e(self, x=0, *, k=1, **kw): ...
def _f(self): ...


@pytest.mark.parametrize("func", [_a, _b, _c, _d, _e, _f])
@pytest.mark.parametrize("count", range(5))
def test_the_count_check_accepts_exactly_what_bind_accepts(func, count):
    spec = types.SimpleNamespace(signature=inspect.signature(func))
    least, most = positional_counts(spec)  # type: ignore[arg-type]
    try:
        spec.signature.bind(None, *range(count))
        binds = True
    except TypeError:
        binds = False
    assert (least <= count <= most) is binds


@given(st.one_of(st.integers(), st.text(), st.binary(), st.booleans(),
                 st.floats(allow_nan=False)))
def test_primitives_pass_through_as_the_converter_makes_them(value):
    s = ser.Serializer()
    got = s.dump(value)
    want = s._conv.unstructure(value)
    assert type(got) is type(want) and got == want


class Sink(Immortal):
    @fork
    def take(self, i: int, payload: bytes, extra: int = 0) -> None: ...

    @rpc
    async def echo(self, i: int) -> int:
        return i


class Source(Immortal):
    @fork
    def go(self, n: int) -> None:
        sink = self.immortal("sink", Sink)
        for i in range(n):
            sink.take(i, bytes(i % 90), *((i,) if i % 3 else ()))
            self.self_proxy.noop(i)

    @fork
    def noop(self, i: int) -> None: ...

    @fork
    def bad(self) -> None:
        self.immortal("sink", Sink).take(1)


def test_a_burst_of_forks_is_the_batch_send_rpcs_makes():
    c = InMemoryCoordinator(Engine(Source, "src", record_outputs=True))
    c.first_start()
    sent: list[bytes] = []
    c._from_binding = sent.append  # type: ignore[method-assign]
    c.send("go", 200)
    assert len(sent) == 1
    decoder = MessageStreamDecoder()
    decoder.receive_data(sent[0])
    events: list[Any] = decoder.drain()
    assert [type(e).__name__ for e in events] == ["AttachTo", "RpcBatch"]
    batch = events[1]
    assert isinstance(batch, RpcBatch) and len(batch.rpcs) == 400
    # the same RPCs, as the connection would have encoded them one by one
    assert c.engine.outputs is not None
    recorded = c.engine.outputs[-400:]
    assert [OutgoingRpc("" if r.destination == "src" else r.destination, *r[1:])
            for r in recorded] == list(batch.rpcs)


@pytest.mark.parametrize("dest", ["sink", "src"])
def test_each_frame_sent_is_sized_as_the_codecs_sized_sizes_it(dest):
    # The send path writes the usual two-byte size itself; frames of one-, two- and
    # three-byte sizes, each side of both edges, must come out as ``sized`` writes them.
    engine = Engine(Source, "src")
    head = outgoing_rpc_head("" if dest == "src" else dest, 7, RpcType.FORK)
    for n in [*range(58, 70), *range(8186, 8198)]:
        args = bytes(n - len(head))
        engine._batch = []
        engine._send(dest, 7, RpcType.FORK, args)
        assert engine._batch == [sized(head + args)], n


def test_a_call_that_does_not_bind_is_still_refused_with_the_methods_name(caplog):
    c = InMemoryCoordinator(Engine(Source, "src", record_outputs=True))
    c.first_start()
    before = list(c.engine.outputs or [])
    with caplog.at_level(logging.ERROR):
        c.send("bad")
    assert "take(): missing a required argument: 'payload'" in caplog.text
    assert c.engine.outputs == before  # nothing was sent


envelope_values = st.recursive(
    st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.text(max_size=20),
              st.binary(max_size=40), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=10)


@given(st.lists(st.tuples(st.integers(0, 1 << 62), st.integers(0, (1 << 63) - 1),
                          st.integers(-1, 1000), st.text(max_size=10),
                          st.one_of(envelope_values, st.just(object()))), max_size=6))
def test_a_kept_packer_packs_what_packb_packs_and_recovers_from_errors(calls):
    encode = ser.envelope_encoder()
    for call in calls:
        try:
            want: Any = ser.encode_envelope(*call)
        except ser.SerializationError as e:
            want = str(e)
        try:
            got: Any = encode(*call)
        except ser.SerializationError as e:
            got = str(e)
        assert got == want


def test_a_kept_packer_after_a_large_envelope_packs_small_ones_alike():
    encode = ser.envelope_encoder()
    for size in (0, 3 << 20, 5, 2 << 20, 7):
        call = (1, 2, -1, "me", [[bytes(size)], {}])
        assert encode(*call) == ser.encode_envelope(*call)
