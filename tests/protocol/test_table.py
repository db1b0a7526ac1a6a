"""The transition table, checked as data: no bytes, no connection."""

from __future__ import annotations

from collections import deque

import pytest

from ambrosia_py.protocol import CHECKPOINT_OWED, REPLAYING_STATES, TRANSITIONS, State, Trigger

S, I = State, Trigger  # noqa: E741

# Every legal move, written out from the protocol document. The table must be exactly this.
DOCUMENTED = {
    # start-up: first start, or recovery from a checkpoint
    (S.START, I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT): S.FIRST_START,
    (S.START, I.RECV_CHECKPOINT): S.LOADING_CHECKPOINT,
    (S.FIRST_START, I.SEND_INITIAL_MESSAGE): S.BECOMING_PRIMARY_CHECKPOINT,
    (S.LOADING_CHECKPOINT, I.RECV_CHECKPOINT_END): S.CHECKPOINT_LOADED,
    # replay, right after the load: the upgrade test's UpgradeService is legal only here
    (S.CHECKPOINT_LOADED, I.RECV_UPGRADE_SERVICE): S.RECOVERING,
    (S.CHECKPOINT_LOADED, I.RECV_RPC): S.RECOVERING,
    (S.CHECKPOINT_LOADED, I.RECV_INITIAL_MESSAGE): S.RECOVERING,
    (S.CHECKPOINT_LOADED, I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT): S.BECOMING_PRIMARY_CHECKPOINT,
    (S.CHECKPOINT_LOADED, I.RECV_BECOMING_PRIMARY): S.PRIMARY,
    (S.CHECKPOINT_LOADED, I.RECV_UPGRADE_TAKE_CHECKPOINT): S.UPGRADE_CHECKPOINT,
    (S.CHECKPOINT_LOADED, I.RECV_TAKE_CHECKPOINT): S.SECONDARY_CHECKPOINT,
    (S.CHECKPOINT_LOADED, I.SEND_RPC): S.CHECKPOINT_LOADED,
    # replaying the log
    (S.RECOVERING, I.RECV_RPC): S.RECOVERING,
    (S.RECOVERING, I.RECV_INITIAL_MESSAGE): S.RECOVERING,
    (S.RECOVERING, I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT): S.BECOMING_PRIMARY_CHECKPOINT,
    (S.RECOVERING, I.RECV_BECOMING_PRIMARY): S.PRIMARY,
    (S.RECOVERING, I.RECV_UPGRADE_TAKE_CHECKPOINT): S.UPGRADE_CHECKPOINT,
    (S.RECOVERING, I.RECV_TAKE_CHECKPOINT): S.SECONDARY_CHECKPOINT,
    (S.RECOVERING, I.SEND_RPC): S.RECOVERING,
    # owing a checkpoint: only sending it moves on
    (S.BECOMING_PRIMARY_CHECKPOINT, I.CHECKPOINT_SENT): S.PRIMARY,
    (S.UPGRADE_CHECKPOINT, I.CHECKPOINT_SENT): S.PRIMARY,
    (S.SECONDARY_CHECKPOINT, I.CHECKPOINT_SENT): S.RECOVERING,
    (S.PRIMARY_CHECKPOINT, I.CHECKPOINT_SENT): S.PRIMARY,
    # normal processing
    (S.PRIMARY, I.RECV_RPC): S.PRIMARY,
    (S.PRIMARY, I.RECV_INITIAL_MESSAGE): S.PRIMARY,
    (S.PRIMARY, I.RECV_TAKE_CHECKPOINT): S.PRIMARY_CHECKPOINT,
    (S.PRIMARY, I.SEND_RPC): S.PRIMARY,
    (S.PRIMARY, I.SEND_IMPULSE): S.PRIMARY,
    (S.PRIMARY, I.REQUEST_CHECKPOINT): S.PRIMARY,
}

PRIMARY_STATES = {S.PRIMARY, S.PRIMARY_CHECKPOINT}

EDGES = [(s, i, n) for s, row in TRANSITIONS.items() for i, n in row.items()]


def walk(inputs: list[Trigger], state: State = S.START) -> list[State]:
    """The states visited; a missing entry is a rejection."""
    seen = [state]
    for inp in inputs:
        row = TRANSITIONS[state]
        if inp not in row:
            raise LookupError(f"{inp.name} rejected in {state.name}")
        state = row[inp]
        seen.append(state)
    return seen


def reachable(start: State, avoid: frozenset[State] = frozenset()) -> set[State]:
    seen = {start}
    todo = deque([start])
    while todo:
        for nxt in TRANSITIONS[todo.popleft()].values():
            if nxt not in seen and nxt not in avoid:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_state_has_a_row_and_every_pair_is_documented_or_rejected() -> None:
    assert set(TRANSITIONS) == set(State)
    table = {(s, i): n for s, i, n in EDGES}
    assert table == DOCUMENTED
    for state in State:
        for inp in Trigger:
            if (state, inp) not in DOCUMENTED:
                with pytest.raises(LookupError):
                    walk([inp], state)


def test_every_state_has_a_description_and_every_input_says_which_side() -> None:
    assert all(s.value for s in State)
    for inp in Trigger:
        assert inp.name.startswith(("RECV_", "SEND_")) or inp in (
            I.CHECKPOINT_SENT,
            I.REQUEST_CHECKPOINT,
        )


def test_reachable_from_start_is_every_state_but_error() -> None:
    assert reachable(S.START) == set(State) - {S.ERROR}


def test_error_is_a_dead_end_that_no_table_entry_enters() -> None:
    assert TRANSITIONS[S.ERROR] == {}
    assert all(n is not S.ERROR for _, _, n in EDGES)
    assert all(n is not S.START for _, _, n in EDGES)


def test_every_live_state_can_still_become_primary() -> None:
    for state in set(State) - {S.ERROR}:
        assert S.PRIMARY in reachable(state), state


def test_primary_is_entered_only_through_the_three_becoming_primary_messages() -> None:
    into_primary = {(s, i) for s, i, n in EDGES if n is S.PRIMARY and s not in PRIMARY_STATES}
    assert into_primary == {
        (S.BECOMING_PRIMARY_CHECKPOINT, I.CHECKPOINT_SENT),
        (S.UPGRADE_CHECKPOINT, I.CHECKPOINT_SENT),
        (S.CHECKPOINT_LOADED, I.RECV_BECOMING_PRIMARY),
        (S.RECOVERING, I.RECV_BECOMING_PRIMARY),
    }
    # ... and the two checkpoint states on the way are entered only by the matching message
    assert {(s, i) for s, i, n in EDGES if n is S.BECOMING_PRIMARY_CHECKPOINT} == {
        (S.FIRST_START, I.SEND_INITIAL_MESSAGE),
        (S.CHECKPOINT_LOADED, I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT),
        (S.RECOVERING, I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT),
    }
    assert {(s, i) for s, i, n in EDGES if n is S.UPGRADE_CHECKPOINT} == {
        (S.CHECKPOINT_LOADED, I.RECV_UPGRADE_TAKE_CHECKPOINT),
        (S.RECOVERING, I.RECV_UPGRADE_TAKE_CHECKPOINT),
    }
    assert {(s, i) for s, i, n in EDGES if n is S.FIRST_START} == {
        (S.START, I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT)
    }


def test_once_primary_always_primary() -> None:
    for s, i, n in EDGES:
        if s in PRIMARY_STATES:
            assert n in PRIMARY_STATES, (s, i, n)


def test_becoming_primary_is_legal_only_while_recovering() -> None:
    legal = {s for s, i, _ in EDGES if i is I.RECV_BECOMING_PRIMARY}
    assert legal == {S.CHECKPOINT_LOADED, S.RECOVERING}
    assert legal <= REPLAYING_STATES


@pytest.mark.parametrize(
    ("inp", "states"),
    [
        (I.SEND_IMPULSE, {S.PRIMARY}),
        (I.REQUEST_CHECKPOINT, {S.PRIMARY}),
        (I.SEND_INITIAL_MESSAGE, {S.FIRST_START}),
        (I.RECV_CHECKPOINT, {S.START}),
        (I.RECV_CHECKPOINT_END, {S.LOADING_CHECKPOINT}),
        (I.RECV_UPGRADE_SERVICE, {S.CHECKPOINT_LOADED}),
        (I.RECV_UPGRADE_TAKE_CHECKPOINT, {S.CHECKPOINT_LOADED, S.RECOVERING}),
        (I.SEND_RPC, {S.CHECKPOINT_LOADED, S.RECOVERING, S.PRIMARY}),
        (I.CHECKPOINT_SENT, set(CHECKPOINT_OWED)),
    ],
)
def test_where_each_input_is_legal(inp: Trigger, states: set[State]) -> None:
    assert {s for s, i, _ in EDGES if i is inp} == states


def test_owing_a_checkpoint_blocks_everything_but_sending_it() -> None:
    only_exit = {s for s in State if set(TRANSITIONS[s]) == {I.CHECKPOINT_SENT}}
    assert only_exit == CHECKPOINT_OWED
    assert S.PRIMARY_CHECKPOINT in CHECKPOINT_OWED
    # neither loading nor first start (which owes an InitialMessage first) dispatches anything
    assert set(TRANSITIONS[S.LOADING_CHECKPOINT]) == {I.RECV_CHECKPOINT_END}
    assert set(TRANSITIONS[S.FIRST_START]) == {I.SEND_INITIAL_MESSAGE}


def test_replaying_states_are_those_between_the_checkpoint_and_becoming_primary() -> None:
    becoming = frozenset({S.BECOMING_PRIMARY_CHECKPOINT, S.UPGRADE_CHECKPOINT, S.PRIMARY})
    assert reachable(S.LOADING_CHECKPOINT, avoid=becoming) == REPLAYING_STATES
    assert not REPLAYING_STATES & PRIMARY_STATES


# The document's start-up flows as input sequences: (name, inputs, end state, primary at each step)
FLOWS = [
    (
        "first start",
        [
            I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT,
            I.SEND_INITIAL_MESSAGE,
            I.CHECKPOINT_SENT,
            I.RECV_INITIAL_MESSAGE,
            I.RECV_RPC,
            I.SEND_IMPULSE,
            I.RECV_TAKE_CHECKPOINT,
            I.CHECKPOINT_SENT,
        ],
        S.PRIMARY,
        "FFFTTTTTT",
    ),
    (
        "standalone recovery",
        [
            I.RECV_CHECKPOINT,
            I.RECV_CHECKPOINT_END,
            I.RECV_RPC,
            I.SEND_RPC,
            I.RECV_RPC,
            I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT,
            I.CHECKPOINT_SENT,
            I.SEND_IMPULSE,
        ],
        S.PRIMARY,
        "FFFFFFFTT",
    ),
    (
        "active/active recovery",
        [I.RECV_CHECKPOINT, I.RECV_CHECKPOINT_END, I.RECV_RPC, I.RECV_BECOMING_PRIMARY],
        S.PRIMARY,
        "FFFFT",
    ),
    (
        "checkpointing secondary",
        [
            I.RECV_CHECKPOINT,
            I.RECV_CHECKPOINT_END,
            I.RECV_RPC,
            I.RECV_TAKE_CHECKPOINT,
            I.CHECKPOINT_SENT,
            I.RECV_RPC,
        ],
        S.RECOVERING,
        "FFFFFFF",
    ),
    (
        "live upgrade",
        [
            I.RECV_CHECKPOINT,
            I.RECV_CHECKPOINT_END,
            I.RECV_RPC,
            I.RECV_UPGRADE_TAKE_CHECKPOINT,
            I.CHECKPOINT_SENT,
        ],
        S.PRIMARY,
        "FFFFFT",
    ),
    (
        "repro test",
        [I.RECV_CHECKPOINT, I.RECV_CHECKPOINT_END, I.RECV_INITIAL_MESSAGE, I.RECV_RPC],
        S.RECOVERING,
        "FFFFF",
    ),
    (
        "upgrade test",
        [I.RECV_CHECKPOINT, I.RECV_CHECKPOINT_END, I.RECV_UPGRADE_SERVICE, I.RECV_RPC],
        S.RECOVERING,
        "FFFFF",
    ),
]


@pytest.mark.parametrize(("name", "inputs", "end", "primary"), FLOWS, ids=[f[0] for f in FLOWS])
def test_document_flow_walks_the_table(
    name: str, inputs: list[Trigger], end: State, primary: str
) -> None:
    states = walk(inputs)
    assert states[-1] is end
    assert "".join("T" if s in PRIMARY_STATES else "F" for s in states) == primary


# Each violation the document names, as a valid prefix and the input that must be rejected.
VIOLATIONS = [
    ("BecomingPrimary on a first start", [I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT],
     I.RECV_BECOMING_PRIMARY),
    ("BecomingPrimary when primary", FLOWS[0][1], I.RECV_BECOMING_PRIMARY),
    ("BecomingPrimary before any checkpoint", [], I.RECV_BECOMING_PRIMARY),
    ("TakeBecomingPrimaryCheckpoint when primary", FLOWS[2][1],
     I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT),
    ("UpgradeTakeCheckpoint when primary", FLOWS[0][1], I.RECV_UPGRADE_TAKE_CHECKPOINT),
    ("UpgradeTakeCheckpoint with no checkpoint", [], I.RECV_UPGRADE_TAKE_CHECKPOINT),
    ("a second checkpoint while recovering", FLOWS[5][1], I.RECV_CHECKPOINT),
    ("a checkpoint when primary", FLOWS[0][1], I.RECV_CHECKPOINT),
    ("UpgradeService after a replayed record", FLOWS[5][1], I.RECV_UPGRADE_SERVICE),
    ("UpgradeService twice", FLOWS[6][1], I.RECV_UPGRADE_SERVICE),
    ("an RPC before start-up", [], I.RECV_RPC),
    ("an RPC while loading", [I.RECV_CHECKPOINT], I.RECV_RPC),
    ("an RPC dispatched while a checkpoint is owed", FLOWS[1][1][:-2], I.RECV_RPC),
    ("an Impulse while recovering", FLOWS[5][1], I.SEND_IMPULSE),
    ("an Impulse before the first checkpoint",
     [I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT, I.SEND_INITIAL_MESSAGE], I.SEND_IMPULSE),
    ("an Impulse during a primary's checkpoint", [*FLOWS[0][1][:-1]], I.SEND_IMPULSE),
    ("an RPC during a primary's checkpoint", [*FLOWS[0][1][:-1]], I.SEND_RPC),
    ("an RPC on first start before the checkpoint",
     [I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT, I.SEND_INITIAL_MESSAGE], I.SEND_RPC),
    ("a checkpoint nobody asked for", FLOWS[0][1], I.CHECKPOINT_SENT),
    ("two InitialMessages", [I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT, I.SEND_INITIAL_MESSAGE],
     I.SEND_INITIAL_MESSAGE),
]


@pytest.mark.parametrize(("name", "prefix", "bad"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_violation_is_rejected(name: str, prefix: list[Trigger], bad: Trigger) -> None:
    walk(prefix)  # the prefix itself is legal
    with pytest.raises(LookupError):
        walk([*prefix, bad])
