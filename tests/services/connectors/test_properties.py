"""Properties over generated input: round trips, arbitrary splits, random and mutated
streams. Whatever the bytes, the library answers with frames or its own typed errors,
never IndexError, struct.error, UnicodeDecodeError or the like."""

from __future__ import annotations

from ambrosia_services.connectors import (
    SINK_VERSION,
    SOURCE_VERSION,
    Ack,
    ConnectionState,
    ConnectorConnection,
    ConnectorLocalError,
    ConnectorRemoteError,
    EosMessage,
    FrameReader,
    Hello,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Role,
    StreamState,
    TwoPCMessage,
    TwoPCReply,
    Where,
    decode_frame,
    decode_twopc,
    encode_frame,
    encode_twopc,
    twopc_message,
)
from ambrosia_services.connectors.twopc import TWOPC_TYPES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import Pair, feed_in_pieces, frames_of
from .strategies import cuts, framed_garbage, frames, mutated, twopc_messages

FAST = settings(max_examples=150, deadline=None)


@FAST
@given(frames)
def test_frame_round_trip(frame: object) -> None:
    data = encode_frame(frame)  # type: ignore[arg-type]
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert decode_frame(data[4], data[5:]) == frame


@FAST
@given(twopc_messages)
def test_twopc_round_trip(msg: TwoPCMessage) -> None:
    assert decode_twopc(encode_twopc(msg)) == msg


@FAST
@given(st.lists(frames, max_size=8), st.data())
def test_any_split_of_a_stream_gives_the_same_frames(fs: list[object], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(f) for f in fs)  # type: ignore[arg-type]
    reader = FrameReader()
    raws = []
    start = 0
    for cut in [*data.draw(cuts(len(stream))), len(stream)]:
        reader.receive_data(stream[start:cut])
        raws += frames_of(reader)
        start = cut
    assert [decode_frame(r.tag, r.body) for r in raws] == fs
    assert reader.at_boundary


def _decode_everything(data: bytes, pieces: list[int]) -> None:
    """Frame and decode ``data`` (stream-0 MESSAGEs as 2PC too); typed errors only."""
    reader = FrameReader(max_frame_size=1 << 16)
    start = 0
    try:
        for cut in [*pieces, len(data)]:
            reader.receive_data(data[start:cut])
            start = cut
            for raw in frames_of(reader):
                frame = decode_frame(raw.tag, raw.body)
                if type(frame) is Message:
                    decode_twopc(frame.payload)
    except ConnectorRemoteError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.data())
def test_random_bytes_yield_only_typed_errors(data: bytes, d: st.DataObject) -> None:
    _decode_everything(data, d.draw(cuts(len(data))))


@settings(max_examples=300, deadline=None)
@given(st.lists(framed_garbage(), min_size=1, max_size=4), st.data())
def test_random_frame_bodies_yield_only_typed_errors(fs: list[bytes], d: st.DataObject) -> None:
    data = b"".join(fs)
    _decode_everything(data, d.draw(cuts(len(data))))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(frames, twopc_messages), min_size=1, max_size=5), st.data())
def test_mutated_frames_yield_only_typed_errors(items: list[object], d: st.DataObject) -> None:
    stream = b"".join(
        encode_frame(twopc_message(i) if isinstance(i, TWOPC_TYPES) else i)  # type: ignore[arg-type]
        for i in items
    )
    bad = d.draw(mutated(stream))
    _decode_everything(bad, d.draw(cuts(len(bad))))


# ---------------------------------------------------------------- sessions
def _enabled_moves(p: Pair) -> dict[str, list[object]]:
    """Every legal move now, with its choices, read off the connections' own states."""
    state = p.c.stream_state
    ids = [1, 2, 3]
    session = p.c._session
    round_open = session is not None and session.open_round is not None
    # Hypothesis leans to the first entries, so the moves that make progress come first.
    moves: dict[str, list[object]] = {
        "message": [] if round_open else [i for i in ids if state(i) is StreamState.OPEN],
        "notify": [i for i in ids if state(i) in (StreamState.START, StreamState.CLOSED)],
        "notify_ack": [i for i in ids if state(i) is StreamState.NOTIFY_SENT],
        "eos": [i for i in ids if state(i) is StreamState.OPEN],
        "ack": [None],
    }
    if session is not None and p.w._session is not None:
        moves["list"] = [None]
        moves["reply_list"] = sorted(p.w._session.asked_rtags)
        moves["phase1"] = [] if round_open else [None]
        moves["vote"] = sorted(p.w._session.awaiting_vote)
        moves["phase2"] = [session.open_round] if round_open else []
    return {name: choices for name, choices in moves.items() if choices}


def _random_session(d: st.DataObject, twopc: bool, feed: object) -> Pair:
    """Drive a pair through a random legal session; each side must read exactly what the
    other sent, whatever the pieces its bytes arrive in."""
    p = Pair(twopc=twopc, feed=feed)  # type: ignore[arg-type]
    hello = Hello(SINK_VERSION if twopc else SOURCE_VERSION, b"", "prog", "inst")
    assert p.c_send(hello) == [hello]
    ok = Ok(d.draw(st.integers(0, 50)))
    assert p.w_send(ok) == [ok]
    next_id: dict[int, int] = {}
    for counter in range(1, d.draw(st.integers(1, 40)) + 1):
        moves = _enabled_moves(p)
        move = d.draw(st.sampled_from(list(moves)))
        choice = d.draw(st.sampled_from(moves[move]))
        ev: object
        if move == "notify":
            ev = Notify(choice, f"s{choice}", d.draw(st.integers(0, 9)))  # type: ignore[arg-type]
        elif move == "notify_ack":
            ev = NotifyAck(d.draw(st.booleans()), choice, d.draw(st.integers(0, 9)))  # type: ignore[arg-type]
            next_id[choice] = d.draw(st.integers(0, 9))  # type: ignore[index]
        elif move == "message":
            ev = Message(choice, next_id[choice], d.draw(st.binary(max_size=10)))  # type: ignore[arg-type,index]
            next_id[choice] += d.draw(st.integers(1, 5))  # type: ignore[index]
        elif move == "eos":
            ev = EosMessage(choice)  # type: ignore[arg-type]
        elif move == "ack":
            known = [i for i in (1, 2, 3) if p.c.stream_state(i) is not StreamState.START]
            acks = tuple((i, d.draw(st.integers(0, 99))) for i in known if d.draw(st.booleans()))
            ev = Ack(d.draw(st.integers(0, 9)), acks)
        elif move == "list":
            ev = ListUncommitted(counter)
        elif move == "reply_list":
            ev = ReplyUncommitted(choice, ("t",))  # type: ignore[arg-type]
        elif move == "phase1":
            ev = Phase1(f"t{counter}", (Where(1, 0, counter),))
        elif move == "vote":
            ev = TwoPCReply(choice, d.draw(st.booleans()))  # type: ignore[arg-type]
        else:
            ev = Phase2(choice, d.draw(st.booleans()))  # type: ignore[arg-type]
        worker_sends = move in ("notify_ack", "ack", "reply_list", "vote")
        assert (p.w_send(ev) if worker_sends else p.c_send(ev)) == [ev]
    for sid in (1, 2, 3):
        assert p.c.stream_state(sid) is p.w.stream_state(sid)
    assert p.c.credits == p.w.credits
    return p


def _random_pieces(d: st.DataObject) -> object:
    def feed(conn: ConnectorConnection, data: bytes) -> list[object]:
        return feed_in_pieces(conn, data, d.draw(cuts(len(data))))

    return feed


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.data())
def test_random_legal_sessions_split_anywhere(twopc: bool, d: st.DataObject) -> None:
    p = _random_session(d, twopc, _random_pieces(d))
    assert p.c.state is p.w.state is ConnectionState.STREAMING


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.data())
def test_mutated_sessions_yield_only_typed_errors(twopc: bool, d: st.DataObject) -> None:
    """Replay a legal session against a fresh worker with the connector's bytes mutated:
    the worker answers with events or typed errors, and after an error it is broken and
    offers an ERROR frame."""
    live = _random_session(d, twopc, None)
    w = ConnectorConnection(Role.WORKER, twopc=twopc)
    mutate_at = d.draw(st.integers(0, len(live.wire) - 1))
    try:
        for step, ((sender, data), (_, event)) in enumerate(
            zip(live.wire, live.sent, strict=True)
        ):
            if sender == "w":
                w.send(event)  # type: ignore[arg-type]
                continue
            if step >= mutate_at:
                data = d.draw(mutated(data))
            feed_in_pieces(w, data, d.draw(cuts(len(data))))
    except ConnectorRemoteError:
        assert w.state is ConnectionState.ERROR
        assert w.take_error_frame().startswith(b"\x00\x00")
    except ConnectorLocalError:
        # The mutated input took the worker somewhere the live worker's next answer is
        # illegal: still a typed error, and the connection is broken.
        assert w.state is ConnectionState.ERROR
