"""``send_frames`` (RPCs encoded as they are sent) against ``send_rpcs`` (OutgoingRpcs
encoded by the connection): the same bytes, the same attachments, the same refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import LocalProtocolError
from ambrosia_core.wire import (
    OutgoingRpc,
    TakeBecomingPrimaryCheckpoint,
    encode_outgoing_rpc,
    encode_zz32,
    encode_zz64,
)
from ambrosia_core.wire.encoders import outgoing_rpc_head, sized
from ambrosia_py.protocol import BindingConnection, State
from tests import strategies as s

from .helpers import control

NAME = "me"


def primary() -> BindingConnection:
    c = BindingConnection(NAME)
    c.receive_data(control(TakeBecomingPrimaryCheckpoint()))
    list(c.events())
    c.send_initial_message(b"hello")
    list(c.events())
    c.send_checkpoint(b"state")
    list(c.events())
    assert c.state is State.PRIMARY
    return c


rpcs = st.builds(OutgoingRpc, st.sampled_from(["", NAME, "peer", "other", "é"]),
                 s.method_ids, st.sampled_from([0, 1]), st.binary(max_size=300),
                 reserved=st.just(0))


def frames_of(batch: list[OutgoingRpc]) -> tuple[list[bytes], list[str]]:
    """How the engine encodes: a head per (destination, method, type), then sized()."""
    frames, dests = [], []
    for r in batch:
        dest = "" if r.destination == NAME else r.destination
        frames.append(sized(outgoing_rpc_head(dest, r.method_id, r.rpc_type) + r.args))
        dests.append(dest)
    return frames, dests


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(rpcs, max_size=6), max_size=4))
def test_send_frames_makes_the_bytes_send_rpcs_makes(batches):
    a, b = primary(), primary()
    for batch in batches:
        frames, dests = frames_of(batch)
        assert a.send_frames(frames, dests) == b.send_rpcs(batch)
    assert a._attached == b._attached


@given(s.names, s.method_ids, s.rpc_types, st.binary(max_size=10_000))
def test_head_and_sized_make_the_outgoing_rpc(dest, method_id, rpc_type, args):
    assert sized(outgoing_rpc_head(dest, method_id, rpc_type) + args) == \
        encode_outgoing_rpc(dest, method_id, rpc_type, args)


def test_send_frames_is_refused_as_send_rpcs_is_and_changes_nothing():
    c = BindingConnection(NAME)
    frames, dests = frames_of([OutgoingRpc("peer", 1, 1, b"x")])
    with pytest.raises(LocalProtocolError, match="cannot send an RPC"):
        c.send_frames(frames, dests)
    assert c.state is State.START and not c._attached
    assert primary().send_frames([], ["peer"]) == b""


@pytest.mark.parametrize("size", [0, 1, 50, 55, 56, 63, 64, 100, 127, 128, 1000, 8185, 8186,
                                  8191, 8192, 20_000])
def test_sized_at_each_size_varint_boundary(size):
    for dest, method_id in (("", 7), ("peer", 0x2F3C4D5E)):
        args = bytes(size)
        assert sized(outgoing_rpc_head(dest, method_id, 1) + args) == \
            encode_outgoing_rpc(dest, method_id, 1, args)
    assert sized(bytes(size)) == encode_zz32(size) + bytes(size)
    assert encode_zz32(size) == encode_zz64(size)  # the general loop, as a reference
