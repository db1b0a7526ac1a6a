"""The binding's protocol state machine fed damaged and disordered coordinator streams.

Whatever the coordinator sends, ``BindingConnection`` may only return events or raise a
``RemoteProtocolError`` subclass (the peer's fault), after which every call raises
``LocalProtocolError``. Never another exception, and never an endless loop. (The decoders
alone are fuzzed in tests/wire/test_properties.py.)
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.errors import LocalProtocolError, RemoteProtocolError
from ambrosia_core.wire import NEED_DATA
from ambrosia_py.protocol import BindingConnection
from ambrosia_py.protocol import events as ev
from tests import strategies as s
from tests.protocol.test_random_flows import Model, conversations

NAME = "fuzzed"
EVENT_LIMIT = 100_000


def feed(pieces: list[bytes]) -> RemoteProtocolError | None:
    """Feed the pieces and answer as a binding would; the error that broke it, if any."""
    c = BindingConnection(NAME)
    events = 0
    try:
        for piece in pieces:
            c.receive_data(piece)
            while True:
                event = c.next_event()
                if event is NEED_DATA:
                    break
                events += 1
                assert events < EVENT_LIMIT, "the connection keeps producing events"
                if isinstance(event, ev.FirstStart):
                    c.send_initial_message(b"fuzz")
                elif isinstance(event, ev.CheckpointRequested) and c.owes_checkpoint:
                    c.send_checkpoint(b"state")
    except RemoteProtocolError as err:
        with pytest.raises(LocalProtocolError):
            c.receive_data(b"\x00")
            c.next_event()
        return err
    return None


def pieces_of(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *cuts})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(conversations(), st.data())
def test_a_mutated_valid_conversation_raises_only_remote_protocol_errors(
        model: Model, data: st.DataObject) -> None:
    damaged = data.draw(s.mutations(model.stream()), label="damaged")
    feed(pieces_of(damaged, data.draw(s.cut_points(len(damaged)), label="cuts")))


@settings(max_examples=300, deadline=None)
@given(s.record_streams(), st.data())
def test_well_formed_records_in_any_order_raise_only_remote_protocol_errors(
        stream: tuple[bytes, list[object]], data: st.DataObject) -> None:
    raw = stream[0]
    feed(pieces_of(raw, data.draw(s.cut_points(len(raw)), label="cuts")))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.data())
def test_random_bytes_raise_only_remote_protocol_errors(
        raw: bytes, data: st.DataObject) -> None:
    feed(pieces_of(raw, data.draw(s.cut_points(len(raw)), label="cuts")))


def test_becoming_primary_before_any_start_is_the_peers_fault() -> None:
    # A sanity anchor: a stream the state machine must refuse does raise, so the tests
    # above are not passing because nothing ever raises.
    from ambrosia_core.wire import BecomingPrimary
    from tests.protocol.helpers import data

    err = feed([data(5, BecomingPrimary())])
    assert isinstance(err, RemoteProtocolError)
