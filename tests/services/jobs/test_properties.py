"""Properties over generated messages and streams: round trips, any split, and hostile
input that can only end in the library's own typed errors."""

from __future__ import annotations

from ambrosia_services.jobs import (
    NEED_DATA,
    Batch,
    FlowControl,
    FrameDecoder,
    JobConnection,
    JobLocalError,
    JobMessage,
    JobRemoteError,
    Role,
    encode,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import strategies as js
from .helpers import JOB, decode_all

ROLE_PAIRS = [
    (Role.INITIATOR, Role.PARTICIPANT),
    (Role.PARTICIPANT, Role.INITIATOR),
    (Role.PARTICIPANT, Role.PARTICIPANT),
]


@given(js.messages)
def test_every_message_round_trips(msg: JobMessage) -> None:
    data = encode(msg)
    got = decode_all([data])
    assert got == [msg]
    assert type(got[0]) is type(msg)
    assert encode(got[0]) == data


@given(st.data(), st.lists(js.messages, max_size=8))
def test_any_split_gives_the_same_messages(data: st.DataObject, msgs: list[JobMessage]) -> None:
    stream = b"".join(encode(m) for m in msgs)
    assert decode_all(data.draw(js.splits(stream))) == msgs


def decode_hostile(pieces: list[bytes]) -> list[JobMessage]:
    """Decode until the input ends or a typed error; anything else fails the test."""
    decoder = FrameDecoder(max_frame_size=4096)
    out: list[JobMessage] = []
    try:
        for piece in pieces:
            decoder.receive_data(piece)
            while (msg := decoder.next_message()) is not NEED_DATA:
                out.append(msg)  # type: ignore[arg-type]
    except JobRemoteError as err:
        assert str(err).count("\n") == 0  # one line
        # Broken for good.
        try:
            decoder.next_message()
        except JobRemoteError as again:
            assert again is err
        else:
            raise AssertionError("a broken decoder went on") from None
    return out


@given(st.data(), st.binary(max_size=300))
def test_random_bytes_give_messages_or_a_typed_error(data: st.DataObject, raw: bytes) -> None:
    for msg in decode_hostile(data.draw(js.splits(raw))):
        assert decode_all([encode(msg)]) == [msg]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(js.messages, min_size=1, max_size=6))
def test_mutated_streams_give_messages_or_a_typed_error(
    data: st.DataObject, msgs: list[JobMessage]
) -> None:
    stream = data.draw(js.mutated(b"".join(encode(m) for m in msgs)))
    for msg in decode_hostile(data.draw(js.splits(stream))):
        assert decode_all([encode(msg)]) == [msg]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(js.messages, min_size=1, max_size=4))
def test_mutated_bodies_in_whole_frames_give_messages_or_a_typed_error(
    data: st.DataObject, msgs: list[JobMessage]
) -> None:
    stream = data.draw(js.mutated_bodies(msgs))
    for msg in decode_hostile(data.draw(js.splits(stream))):
        assert decode_all([encode(msg)]) == [msg]


@given(st.data(), st.lists(js.raw_frames, min_size=1, max_size=4))
def test_frames_with_edge_values_give_messages_or_a_typed_error(
    data: st.DataObject, frames: list[bytes]
) -> None:
    for msg in decode_hostile(data.draw(js.splits(b"".join(frames)))):
        assert decode_all([encode(msg)]) == [msg]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(ROLE_PAIRS), st.lists(js.messages, min_size=1, max_size=6))
def test_connections_meet_hostile_streams_with_typed_errors_only(
    data: st.DataObject, roles: tuple[Role, Role], msgs: list[JobMessage]
) -> None:
    conn = JobConnection(*roles, initial_credits=data.draw(st.integers(0, 100)))
    stream = b"".join(encode(m) for m in msgs)
    if data.draw(st.booleans()):
        stream = data.draw(js.mutated(stream))
    try:
        for piece in data.draw(js.splits(stream)):
            conn.receive_data(piece)
            list(conn.events())
    except JobRemoteError:
        try:
            conn.next_event()
        except JobLocalError:
            return
        raise AssertionError("a broken connection went on") from None


@given(st.lists(st.tuples(st.booleans(), st.integers(-3, 40)), max_size=40), st.integers(0, 40))
def test_a_sender_that_obeys_its_connection_never_overruns_the_receiver(
    steps: list[tuple[bool, int]], initial: int
) -> None:
    """Random batches (sized around the credit left, where off-by-one mistakes live) and
    grants: the sender's connection refuses what the credit does not cover, so the
    receiver never sees an overrun, and both ends agree on the credit."""
    sender = JobConnection(Role.PARTICIPANT, Role.INITIATOR, initial_credits=initial)
    receiver = JobConnection(Role.INITIATOR, Role.PARTICIPANT, initial_credits=initial)
    number = 0
    for is_batch, n in steps:
        if is_batch:
            size = max(0, sender.send_credit(JOB, 0) + min(n, 3))
            try:
                wire = sender.send(Batch(JOB, 0, number, bytes(size)))
            except JobLocalError:
                assert size > sender.send_credit(JOB, 0)
                continue
            number += 1
            assert list(receiver.events()) == []
            receiver.receive_data(wire)
            assert list(receiver.events()) == [Batch(JOB, 0, number - 1, bytes(size))]
        elif n > 0:
            sender.receive_data(receiver.send(FlowControl(JOB, 0, n)))
            assert list(sender.events()) == [FlowControl(JOB, 0, n)]
        assert sender.send_credit(JOB, 0) == receiver.receive_credit(JOB, 0) >= 0
