"""The connection and stream state tables, checked as data (no bytes), and the connection
checked against them: a frame is accepted exactly when its table has an entry."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ambrosia_services.connectors import (
    CONNECTION_TRANSITIONS,
    STREAM_TRANSITIONS,
    Ack,
    ConnectionState,
    EosMessage,
    ErrorFrame,
    Hello,
    IllegalSendError,
    ListUncommitted,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    Restart,
    Role,
    StreamInput,
    StreamState,
    TwoPCReply,
    UnexpectedFrameError,
    WorkersLeft,
    encode_frame,
)

from .helpers import Pair

C, S, I = ConnectionState, StreamState, StreamInput  # noqa: E741
CONNECTOR, WORKER = Role.CONNECTOR, Role.WORKER

EXPECTED_CONNECTION = {
    CONNECTOR: {
        C.CONNECTED: {Hello: C.HANDSHAKE, ErrorFrame: C.ERROR},
        C.HANDSHAKE: {ErrorFrame: C.ERROR},
        C.STREAMING: {
            Notify: C.STREAMING,
            Message: C.STREAMING,
            EosMessage: C.STREAMING,
            ListUncommitted: C.STREAMING,
            Phase1: C.STREAMING,
            Phase2: C.STREAMING,
            WorkersLeft: C.STREAMING,
            ErrorFrame: C.ERROR,
        },
        C.ERROR: {},
        C.DISCONNECTED: {},
    },
    WORKER: {
        C.CONNECTED: {ErrorFrame: C.ERROR},
        C.HANDSHAKE: {Ok: C.STREAMING, ErrorFrame: C.ERROR},
        C.STREAMING: {
            NotifyAck: C.STREAMING,
            Ack: C.STREAMING,
            Restart: C.DISCONNECTED,
            ReplyUncommitted: C.STREAMING,
            TwoPCReply: C.STREAMING,
            ErrorFrame: C.ERROR,
        },
        C.ERROR: {},
        C.DISCONNECTED: {},
    },
}

EXPECTED_STREAM = {
    CONNECTOR: {
        S.START: {I.NOTIFY: S.NOTIFY_SENT},
        S.NOTIFY_SENT: {},
        S.OPEN: {I.MESSAGE: S.OPEN, I.EOS: S.CLOSED},
        S.CLOSED: {I.NOTIFY: S.NOTIFY_SENT},
        S.TERMINATED: {},
    },
    WORKER: {
        S.START: {},
        S.NOTIFY_SENT: {
            I.NOTIFY_ACCEPTED: S.OPEN,
            I.NOTIFY_REFUSED: S.CLOSED,
            I.ACK: S.NOTIFY_SENT,
            I.RESTART: S.TERMINATED,
        },
        S.OPEN: {I.ACK: S.OPEN, I.RESTART: S.TERMINATED},
        S.CLOSED: {I.ACK: S.CLOSED, I.RESTART: S.TERMINATED},
        S.TERMINATED: {},
    },
}


def _plain(table: object) -> object:
    if hasattr(table, "items"):
        return {k: _plain(v) for k, v in table.items()}
    return table


def test_connection_table_is_exactly_the_protocol() -> None:
    assert _plain(CONNECTION_TRANSITIONS) == EXPECTED_CONNECTION


def test_stream_table_is_exactly_the_protocol() -> None:
    assert _plain(STREAM_TRANSITIONS) == EXPECTED_STREAM


def test_tables_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        CONNECTION_TRANSITIONS[CONNECTOR][C.STREAMING][Ok] = C.STREAMING  # type: ignore[index]
    with pytest.raises(TypeError):
        STREAM_TRANSITIONS[WORKER][S.START][I.MESSAGE] = S.OPEN  # type: ignore[index]


def test_every_state_has_a_row_for_both_roles() -> None:
    for role in Role:
        assert set(CONNECTION_TRANSITIONS[role]) == set(ConnectionState)
        assert set(STREAM_TRANSITIONS[role]) == set(StreamState)


def test_the_roles_send_disjoint_frames_but_error() -> None:
    def sent(role: Role) -> set[type]:
        return {t for row in CONNECTION_TRANSITIONS[role].values() for t in row}

    assert sent(CONNECTOR) & sent(WORKER) == {ErrorFrame}
    assert {Hello, Notify, Message, EosMessage} <= sent(CONNECTOR)
    assert {Ok, NotifyAck, Ack, Restart} <= sent(WORKER)


def test_error_breaks_every_live_state_and_dead_states_accept_nothing() -> None:
    for role in Role:
        for state in (C.CONNECTED, C.HANDSHAKE, C.STREAMING):
            assert CONNECTION_TRANSITIONS[role][state][ErrorFrame] is C.ERROR
        assert CONNECTION_TRANSITIONS[role][C.ERROR] == {}
        assert CONNECTION_TRANSITIONS[role][C.DISCONNECTED] == {}
        assert STREAM_TRANSITIONS[role][S.TERMINATED] == {}


def _reachable(table: object, start: object) -> set[object]:
    rows = {state: row for role_rows in table.values() for state, row in role_rows.items()}  # type: ignore[attr-defined]
    merged: dict[object, set[object]] = {}
    for role_rows in table.values():  # type: ignore[attr-defined]
        for state, row in role_rows.items():
            merged.setdefault(state, set()).update(row.values())
    seen, todo = {start}, [start]
    while todo:
        for nxt in merged[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert set(rows) == set(merged)
    return seen


def test_every_state_is_reachable_from_the_start() -> None:
    assert _reachable(CONNECTION_TRANSITIONS, C.CONNECTED) == set(ConnectionState)
    assert _reachable(STREAM_TRANSITIONS, S.START) == set(StreamState)


def test_a_closed_stream_can_be_notified_again_and_only_by_the_connector() -> None:
    assert STREAM_TRANSITIONS[CONNECTOR][S.CLOSED][I.NOTIFY] is S.NOTIFY_SENT
    assert I.NOTIFY not in STREAM_TRANSITIONS[WORKER][S.CLOSED]
    assert I.MESSAGE not in STREAM_TRANSITIONS[CONNECTOR][S.START]
    assert I.MESSAGE not in STREAM_TRANSITIONS[CONNECTOR][S.NOTIFY_SENT]


# ---------------------------------------------------------------- the connection obeys
def _pair_in(state: ConnectionState) -> Pair:
    """A 2PC pair whose connection state is ``state`` on both sides; stream 1 is OPEN and
    stream 3 waits for its NOTIFY_ACK."""
    p = Pair(twopc=True)
    if state is C.CONNECTED:
        return p
    p.c_send(Hello(p.version, b"", "prog", "inst"))
    if state is C.HANDSHAKE:
        return p
    p.w_send(Ok(10))
    p.open_stream(1)
    p.c_send(Notify(3, "s3"))
    if state is C.ERROR:
        p.c_send(ErrorFrame("stop"))
    elif state is C.DISCONNECTED:
        p.w_send(Restart())
    return p


# One frame of each type that passes every stream and 2PC rule in a pair from _pair_in.
SAMPLES: dict[type, Callable[[], object]] = {
    Hello: lambda: Hello("v0.0.1", b"", "prog", "inst"),
    Ok: lambda: Ok(5),
    ErrorFrame: lambda: ErrorFrame("bye"),
    Notify: lambda: Notify(2, "s2"),
    NotifyAck: lambda: NotifyAck(True, 3, 0),
    Message: lambda: Message(1, 7, b"x"),
    Ack: lambda: Ack(1),
    Restart: lambda: Restart(),
    EosMessage: lambda: EosMessage(1),
    ListUncommitted: lambda: ListUncommitted(1),
    Phase1: lambda: Phase1("t"),
    Phase2: lambda: Phase2("t", True),
    WorkersLeft: lambda: WorkersLeft(1),
}


@pytest.mark.parametrize("state", list(ConnectionState), ids=lambda s: s.name)
@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.name)
def test_send_is_allowed_exactly_when_the_table_says(role: Role, state: ConnectionState) -> None:
    for kind, make in SAMPLES.items():
        p = _pair_in(state)
        conn = p.c if role is CONNECTOR else p.w
        assert conn.state is state
        expected = CONNECTION_TRANSITIONS[role][state].get(kind)
        if state is C.ERROR:
            continue  # covered below: a broken connection refuses everything
        if expected is None:
            with pytest.raises(IllegalSendError):
                conn.send(make())  # type: ignore[arg-type]
            assert conn.state is C.ERROR
        else:
            conn.send(make())  # type: ignore[arg-type]
            assert conn.state is expected, kind


@pytest.mark.parametrize("state", [C.CONNECTED, C.HANDSHAKE, C.STREAMING], ids=lambda s: s.name)
@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.name)
def test_receive_is_allowed_exactly_when_the_table_says(
    role: Role, state: ConnectionState
) -> None:
    """``role`` is the sender; the frame is fed as bytes to the other side."""
    for kind, make in SAMPLES.items():
        if kind in (ListUncommitted, Phase1, Phase2, WorkersLeft):
            continue  # 2PC messages travel as MESSAGE frames; see test_connection
        p = _pair_in(state)
        receiver = p.w if role is CONNECTOR else p.c
        expected = CONNECTION_TRANSITIONS[role][state].get(kind)
        receiver.receive_data(encode_frame(make()))  # type: ignore[arg-type]
        if expected is None:
            with pytest.raises(UnexpectedFrameError):
                receiver.next_event()
            assert receiver.state is C.ERROR
        else:
            assert receiver.next_event() == make()
            assert receiver.state is expected, kind
