"""Random valid conversations generated from the transition table, fed in arbitrary pieces.

A small model walks ``TRANSITIONS`` from START, choosing among the inputs the table allows,
and writes down the coordinator's bytes, the events the binding must report (with its flags
after each), the binding's intents and the bytes they must produce. The connection is then
fed those bytes cut at random places and must agree with the model exactly.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from ambrosia_core.wire import (
    BecomingPrimary,
    Checkpoint,
    CountReplayableRpcBatch,
    InitialMessage,
    Message,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    UpgradeService,
    UpgradeTakeCheckpoint,
    encode_outgoing_rpc,
)
from ambrosia_py.protocol import (
    TRANSITIONS,
    BecamePrimary,
    BindingConnection,
    CheckpointLoadChunk,
    CheckpointLoaded,
    CheckpointLoadStarted,
    CheckpointReason,
    CheckpointRequested,
    FirstStart,
    IncomingRpc,
    InitialMessageReceived,
    RecoveryComplete,
    State,
    Trigger,
    UpgradeRequested,
)

from .helpers import checkpoint, control, data, joined, split_at

S, I = State, Trigger  # noqa: E741
NAME = "me"
PRIMARY_STATES = {S.PRIMARY, S.PRIMARY_CHECKPOINT}
REPLAYING = {S.LOADING_CHECKPOINT, S.CHECKPOINT_LOADED, S.RECOVERING, S.SECONDARY_CHECKPOINT}
# Inputs that follow from others rather than being chosen.
FORCED = {I.SEND_INITIAL_MESSAGE, I.CHECKPOINT_SENT, I.RECV_CHECKPOINT_END}
CONTROL: dict[Trigger, Message] = {
    I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT: TakeBecomingPrimaryCheckpoint(),
    I.RECV_TAKE_CHECKPOINT: TakeCheckpoint(),
    I.RECV_BECOMING_PRIMARY: BecomingPrimary(),
    I.RECV_UPGRADE_TAKE_CHECKPOINT: UpgradeTakeCheckpoint(),
    I.RECV_UPGRADE_SERVICE: UpgradeService(),
}

small_bytes = st.binary(max_size=12)
rpcs = st.builds(
    Rpc, st.integers(-(2**31), 2**31 - 1), st.integers(0, 2), small_bytes, st.just(0)
)
destinations = st.sampled_from(["", NAME, "a", "b", "svc"])


def outgoing(rpc_types: st.SearchStrategy[int]) -> st.SearchStrategy[OutgoingRpc]:
    return st.builds(
        OutgoingRpc, destinations, st.integers(-5, 300), rpc_types, small_bytes, st.just(0)
    )


# ("initial", bytes) | ("checkpoint", blob, cuts) | ("rpcs", [OutgoingRpc]) | ("request",)
Action = tuple[object, ...]


@dataclass
class Model:
    """What the coordinator sends and what the binding must do, built one input at a time."""

    draw: st.DrawFn
    state: State = S.START
    records: list[list[object]] = field(default_factory=list)  # [seq, messages...]
    next_seq: int = 0
    events: list[tuple[object, tuple[bool, bool]]] = field(default_factory=list)
    actions: defaultdict[int, list[Action]] = field(default_factory=lambda: defaultdict(list))
    output: bytearray = field(default_factory=bytearray)
    attached: set[str] = field(default_factory=set)
    replayed: int = 0
    recovered: bool = False
    upgraded: bool = False

    # ------------------------------------------------------------ bookkeeping
    def move(self, inp: Trigger) -> None:
        self.state = TRANSITIONS[self.state][inp]

    def flags(self) -> tuple[bool, bool]:
        return (self.state in PRIMARY_STATES, self.state in REPLAYING)

    def emit(self, *events: object) -> None:
        self.events.extend((e, self.flags()) for e in events)

    def act(self, action: Action) -> None:
        # performed right after the last event so far (chunks are not counted)
        key = sum(1 for e, _ in self.events if not isinstance(e, CheckpointLoadChunk))
        self.actions[key].append(action)

    def data_message(self, msg: Message) -> int:
        last = self.records[-1] if self.records else None
        if last is not None and isinstance(last[0], int) and last[0] >= 0 and self.draw(
            st.booleans()
        ):
            last.append(msg)
            return last[0]
        seq = self.next_seq
        self.next_seq += 1
        self.records.append([seq, msg])
        return seq

    def control_message(self, msg: Message) -> None:
        last = self.records[-1] if self.records else None
        if last is not None and last[0] != "checkpoint" and self.draw(st.booleans()):
            last.append(msg)  # packed behind whatever came before in one record
        else:
            self.records.append([-1, msg])

    def stream(self) -> bytes:
        out = b""
        for seq, *msgs in self.records:
            if seq == "checkpoint":
                out += checkpoint(msgs[0])  # type: ignore[arg-type]
            elif seq == -1:
                out += control(*msgs)  # type: ignore[arg-type]
            else:
                out += data(seq, *msgs)  # type: ignore[arg-type]
        return out

    # ------------------------------------------------------------ the binding's answers
    def send_checkpoint(self) -> None:
        before = self.state
        blob = self.draw(small_bytes)
        cuts = self.draw(st.lists(st.integers(0, len(blob)), max_size=3))
        self.act(("checkpoint", blob, cuts))
        self.output += Checkpoint(len(blob)).encode() + blob
        self.move(I.CHECKPOINT_SENT)
        if before in (S.BECOMING_PRIMARY_CHECKPOINT, S.UPGRADE_CHECKPOINT):
            self.emit(BecamePrimary(recovered=self.recovered, checkpointed=True))

    def send_rpcs(self, impulse: bool) -> None:
        kinds = st.integers(0, 2) if impulse else st.integers(0, 1)
        batch = self.draw(st.lists(outgoing(kinds), min_size=1, max_size=3))
        if impulse and not any(r.rpc_type == RpcType.IMPULSE for r in batch):
            batch[0] = batch[0]._replace(rpc_type=RpcType.IMPULSE)
        self.act(("rpcs", batch))
        bodies = []
        for r in batch:
            dest = "" if r.destination == NAME else r.destination
            if dest and dest not in self.attached:
                self.attached.add(dest)
                self.output += bytes([2 * (len(dest) + 1), 1]) + dest.encode()
            bodies.append(r._replace(destination=dest))
        if len(bodies) == 1:
            self.output += encode_outgoing_rpc(*bodies[0])
        else:
            self.output += RpcBatch(tuple(bodies)).encode()
        self.move(I.SEND_IMPULSE if impulse else I.SEND_RPC)

    # ------------------------------------------------------------ one chosen input
    def step(self, inp: Trigger) -> None:
        before = self.state
        replay = before in REPLAYING
        if inp is I.RECV_CHECKPOINT:
            blob = self.draw(st.binary(max_size=40))
            self.records.append(["checkpoint", blob])
            self.next_seq = self.draw(st.integers(0, 10**6))
            self.recovered = True
            self.move(inp)
            self.emit(CheckpointLoadStarted(len(blob)))
            if blob:
                self.emit(CheckpointLoadChunk(blob))
            self.move(I.RECV_CHECKPOINT_END)
            self.emit(CheckpointLoaded(len(blob)))
        elif inp is I.RECV_RPC:
            form = self.draw(st.sampled_from(["one", "batch", "counted"]))
            if form == "one":
                batch = [self.draw(rpcs)]
                seq = self.data_message(batch[0])
            else:
                batch = self.draw(st.lists(rpcs, min_size=1, max_size=4))
                if form == "batch":
                    seq = self.data_message(RpcBatch(tuple(batch)))
                else:
                    n = sum(1 for r in batch if r.rpc_type != RpcType.IMPULSE)
                    seq = self.data_message(CountReplayableRpcBatch(tuple(batch), n))
            self.move(inp)
            for r in batch:
                self.emit(IncomingRpc(r, seq, replay))
            self.replayed += len(batch) if replay else 0
        elif inp is I.RECV_INITIAL_MESSAGE:
            payload = self.draw(small_bytes)
            seq = self.data_message(InitialMessage(payload))
            self.move(inp)
            self.emit(InitialMessageReceived(payload, seq, replay))
            self.replayed += 1 if replay else 0
        elif inp in CONTROL:
            self.control_message(CONTROL[inp])
            self.move(inp)
            self.control_events(inp, before)
        elif inp is I.SEND_RPC or inp is I.SEND_IMPULSE:
            self.send_rpcs(impulse=inp is I.SEND_IMPULSE)
        else:
            assert inp is I.REQUEST_CHECKPOINT
            self.act(("request",))
            self.output += b"\x02\x02"
            self.move(inp)
        if self.state in (
            S.BECOMING_PRIMARY_CHECKPOINT,
            S.UPGRADE_CHECKPOINT,
            S.SECONDARY_CHECKPOINT,
            S.PRIMARY_CHECKPOINT,
        ):
            self.send_checkpoint()

    def control_events(self, inp: Trigger, before: State) -> None:
        if inp is I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT and before is S.START:
            self.emit(FirstStart())
            payload = self.draw(small_bytes)
            self.act(("initial", payload))
            self.output += InitialMessage(payload).encode()
            self.move(I.SEND_INITIAL_MESSAGE)
            self.emit(CheckpointRequested(CheckpointReason.FIRST_START))
        elif inp is I.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT:
            self.emit(
                RecoveryComplete(self.replayed),
                CheckpointRequested(CheckpointReason.BECOMING_PRIMARY),
            )
        elif inp is I.RECV_TAKE_CHECKPOINT:
            self.emit(CheckpointRequested(CheckpointReason.PERIODIC))
        elif inp is I.RECV_BECOMING_PRIMARY:
            self.emit(
                RecoveryComplete(self.replayed), BecamePrimary(recovered=True, checkpointed=False)
            )
        elif inp is I.RECV_UPGRADE_TAKE_CHECKPOINT:
            self.upgraded = True
            self.emit(
                UpgradeRequested(live=True),
                RecoveryComplete(self.replayed),
                CheckpointRequested(CheckpointReason.UPGRADE),
            )
        else:
            self.upgraded = True
            self.emit(UpgradeRequested(live=False))


@st.composite
def conversations(draw: st.DrawFn) -> Model:
    model = Model(draw)
    for _ in range(draw(st.integers(1, 20))):
        choices = sorted((i for i in TRANSITIONS[model.state] if i not in FORCED), key=str)
        if not choices:
            break
        model.step(draw(st.sampled_from(choices)))
    return model


def run(model: Model, pieces: list[bytes]) -> tuple[BindingConnection, list, bytes]:
    """Feed the pieces, draining after each and doing the binding's part on cue."""
    c = BindingConnection(NAME)
    seen: list[tuple[object, tuple[bool, bool]]] = []
    out = bytearray()
    done = 0
    assert not model.actions.get(0), "the binding never acts before its first event"
    for piece in pieces:
        c.receive_data(piece)
        for ev in c.events():
            seen.append((ev, (c.is_primary, c.is_replaying)))
            if isinstance(ev, CheckpointLoadChunk):
                continue
            done += 1
            for action in model.actions.get(done, []):
                out += perform(c, action)
    return c, joined(seen), bytes(out)


def perform(c: BindingConnection, action: Action) -> bytes:
    kind = action[0]
    if kind == "initial":
        return c.send_initial_message(action[1])  # type: ignore[arg-type]
    if kind == "checkpoint":
        blob: bytes = action[1]  # type: ignore[assignment]
        out = c.begin_checkpoint(len(blob))
        for part in split_at(blob, action[2]):  # type: ignore[arg-type]
            out += c.checkpoint_data(part)
        return out
    if kind == "rpcs":
        batch: list[OutgoingRpc] = action[1]  # type: ignore[assignment]
        if len(batch) == 1:
            return c.send_rpc(*batch[0])
        return c.send_rpcs(batch)
    return c.request_checkpoint()


@settings(max_examples=120, deadline=None)
@given(conversations(), st.data())
def test_random_conversation_in_random_pieces(model: Model, pieces_data: st.DataObject) -> None:
    stream = model.stream()
    cuts = pieces_data.draw(st.lists(st.integers(0, len(stream)), max_size=20), label="cuts")
    c, seen, out = run(model, split_at(stream, cuts))
    assert seen == model.events
    assert out == bytes(model.output)
    assert c.state is model.state
    assert c.upgraded is model.upgraded


@settings(max_examples=30, deadline=None)
@given(conversations())
def test_random_conversation_one_byte_at_a_time(model: Model) -> None:
    stream = model.stream()
    whole = run(model, [stream])
    bytewise = run(model, [stream[i : i + 1] for i in range(len(stream))])
    assert whole[1] == bytewise[1] == model.events
    assert whole[2] == bytewise[2] == bytes(model.output)
