"""The binding's side of the AMBROSIA protocol, sans-IO.

``BindingConnection`` is fed the bytes the coordinator sends (its *send port*) and returns
typed events; the binding's intents (send an RPC, send a checkpoint, ...) become bytes for
the coordinator's *receive port*. It holds no socket. It enforces the start-up flows of
the protocol document and the rules of normal processing:

- nothing is dispatched while a checkpoint is loading or owed (records that arrive while
  the binding owes a checkpoint stay buffered until its last byte has been sent);
- an Impulse before the instance is primary raises ``ImpulseDuringRecoveryError``;
- ``AttachTo`` goes out once per destination, before the first RPC to it, never for a
  self-call;
- ``BecomingPrimary`` (or any message) in a state that does not allow it raises
  ``UnexpectedMessageError``, and the connection refuses to go on.

Usage::

    conn.receive_data(chunk)              # whatever the socket gave
    for event in conn.events():           # until more bytes are needed
        ...                               # FirstStart -> conn.send_initial_message(...)
                                          # CheckpointRequested -> conn.send_checkpoint(...)

Answers queue events of their own: after ``send_initial_message`` comes
``CheckpointRequested(FIRST_START)``, and after the last byte of a becoming-primary or upgrade
checkpoint comes ``BecamePrimary``; call ``events()`` again after answering. A checkpoint
may be sent whole (``send_checkpoint``) or streamed (``begin_checkpoint`` then
``checkpoint_data`` until the announced size is reached). While a checkpoint is owed
(``owes_checkpoint``), bytes fed are only buffered, within the decoder's frame bound: answer
promptly, or stop reading the socket until the checkpoint is out.

Whose fault: the coordinator's violations and malformed bytes raise
``RemoteProtocolError`` subclasses and break the connection (every later call raises
``LocalProtocolError``). A refused intent of the binding's raises ``LocalProtocolError``
(``ImpulseDuringRecoveryError`` for an early Impulse) but emits no bytes and changes no
state, so the connection goes on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from ..errors import (
    EncodeError,
    ImpulseDuringRecoveryError,
    LocalProtocolError,
    RemoteProtocolError,
    UnexpectedMessageError,
)
from ..wire import (
    CHECKPOINT_SEQ,
    NEED_DATA,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    CountReplayableRpcBatch,
    InitialMessage,
    LogRecordDecoder,
    MessageType,
    NeedData,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    UpgradeService,
    UpgradeTakeCheckpoint,
    encode_outgoing_rpc,
    encode_zz32,
)
from ..wire import TakeCheckpoint as TakeCheckpointMsg
from ..wire.messages import AttachTo
from ..wire.stream import DEFAULT_MAX_FRAME_SIZE
from . import events as ev
from ._state import CHECKPOINT_OWED, REPLAYING_STATES, TRANSITIONS, State, Trigger

__all__ = ["BindingConnection"]

_REQUEST_CHECKPOINT = TakeCheckpointMsg().encode()
_RPC_BATCH_BYTE = bytes((MessageType.RPC_BATCH,))

_MESSAGE_INPUT = {
    TakeBecomingPrimaryCheckpoint: Trigger.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT,
    TakeCheckpointMsg: Trigger.RECV_TAKE_CHECKPOINT,
    BecomingPrimary: Trigger.RECV_BECOMING_PRIMARY,
    UpgradeTakeCheckpoint: Trigger.RECV_UPGRADE_TAKE_CHECKPOINT,
    UpgradeService: Trigger.RECV_UPGRADE_SERVICE,
    InitialMessage: Trigger.RECV_INITIAL_MESSAGE,
    Rpc: Trigger.RECV_RPC,
}


class BindingConnection:
    """One binding's conversation with its coordinator, from connect to close.

    Args:
        instance_name: this instance's registered name; an RPC to it is a self-call.
        max_frame_size: bound on a single log record from the coordinator.
        verify_checksums: check XXH64 of data records (the real bindings do not; ours do).
    """

    def __init__(
        self,
        instance_name: str = "",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        verify_checksums: bool = True,
    ) -> None:
        self.instance_name = instance_name
        self._decoder = LogRecordDecoder(
            max_frame_size=max_frame_size, verify_checksums=verify_checksums
        )
        self._state = State.START
        self._pending: deque[tuple[object, int]] = deque()  # (message, record seq id)
        self._out_events: deque[ev.ProtocolEvent] = deque()
        self._attached: set[str] = set()
        self._ckpt_to_send = -1  # bytes still owed of a checkpoint being sent
        self._ckpt_reason: ev.CheckpointReason | None = None
        self._recovered = False  # went through a checkpoint load in this life
        self._upgraded = False
        self.messages_replayed = 0
        self.last_seq_id: int | None = None
        self.committer_id: int | None = None

    # ------------------------------------------------------------ properties
    @property
    def state(self) -> State:
        return self._state

    @property
    def is_primary(self) -> bool:
        """True once the instance has become primary (Impulses are legal)."""
        return self._state in (State.PRIMARY, State.PRIMARY_CHECKPOINT)

    @property
    def is_replaying(self) -> bool:
        """True while recovering: inputs are replays of an earlier life's."""
        return self._state in REPLAYING_STATES

    @property
    def owes_checkpoint(self) -> bool:
        return self._state in CHECKPOINT_OWED

    @property
    def upgraded(self) -> bool:
        """True once an UpgradeTakeCheckpoint or UpgradeService switched versions."""
        return self._upgraded

    # ------------------------------------------------------------ transitions
    def _receive(self, inp: Trigger, what: str, seq_id: int) -> State:
        """Apply an input from the coordinator; a missing table entry breaks the connection."""
        state = self._state
        nxt = TRANSITIONS[state].get(inp)
        if nxt is None:
            self._state = State.ERROR
            raise UnexpectedMessageError(
                f"coordinator protocol violation: {inp.value} ({what}) while the binding "
                f"is in state {state.name} ({state.value})",
                seq_id=seq_id if seq_id >= 0 else self.last_seq_id,
            )
        self._state = nxt
        return nxt

    def _refuse_if_illegal(self, inp: Trigger, what: str = "") -> None:
        """Raise if the binding may not do ``inp`` now. A refused intent emits no bytes and
        leaves the state unchanged, so the connection stays usable."""
        state = self._state
        if inp in TRANSITIONS[state]:
            return
        if state is State.ERROR:
            raise LocalProtocolError("the connection is broken by an earlier protocol error")
        detail = f" ({what})" if what else ""
        if inp is Trigger.SEND_IMPULSE and not self.is_primary:
            raise ImpulseDuringRecoveryError(
                f"an Impulse{detail} cannot be sent before the instance is primary "
                f"(state {state.name}: {state.value})"
            )
        raise LocalProtocolError(
            f"cannot {inp.value}{detail} in state {state.name} ({state.value})"
        )

    def _do(self, inp: Trigger, what: str = "") -> State:
        """Apply a local intent (checked first with ``_refuse_if_illegal``)."""
        self._refuse_if_illegal(inp, what)
        self._state = TRANSITIONS[self._state][inp]
        return self._state

    # ------------------------------------------------------------ receiving
    def receive_data(self, data: bytes) -> None:
        """Bytes from the coordinator's send port."""
        if self._state is State.ERROR:
            raise LocalProtocolError("the connection is broken by an earlier protocol error")
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError:
            self._state = State.ERROR
            raise

    def next_event(self) -> ev.ProtocolEvent | NeedData:
        """The next event, or ``NEED_DATA``. Raises ``RemoteProtocolError`` on bad input."""
        while True:
            if self._out_events:
                return self._out_events.popleft()
            if self._state is State.ERROR:
                raise LocalProtocolError("the connection is broken by an earlier protocol error")
            if self._state in CHECKPOINT_OWED or self._state is State.FIRST_START:
                return NEED_DATA  # nothing more is dispatched until the binding has answered
            if not self._pending:
                if self._state is State.LOADING_CHECKPOINT:
                    return self._next_checkpoint_event()
                if not self._read_record():
                    return NEED_DATA
                continue
            msg, seq = self._pending.popleft()
            event = self._dispatch(msg, seq)
            if event is not None:
                return event

    def _read_record(self) -> bool:
        """Queue the next log record's messages; false if it has not fully arrived."""
        try:
            item = self._decoder.next_event()
        except RemoteProtocolError:
            self._state = State.ERROR
            raise
        if item is NEED_DATA:
            return False
        assert not isinstance(item, (CheckpointChunk, CheckpointEnd, NeedData))
        if self.committer_id is None:
            self.committer_id = item.committer_id
        seq = item.seq_id
        if seq >= 0:
            self.last_seq_id = seq
        self._pending.extend((m, seq) for m in item.messages)
        return True

    def events(self) -> Iterator[ev.ProtocolEvent]:
        """Every event available now."""
        while True:
            e = self.next_event()
            if e is NEED_DATA:
                return
            yield e  # type: ignore[misc]

    def _next_checkpoint_event(self) -> ev.ProtocolEvent | NeedData:
        try:
            item = self._decoder.next_event()
        except RemoteProtocolError:
            self._state = State.ERROR
            raise
        if item is NEED_DATA:
            return NEED_DATA
        if isinstance(item, CheckpointChunk):
            return ev.CheckpointLoadChunk(item.data)
        assert isinstance(item, CheckpointEnd)
        self._receive(Trigger.RECV_CHECKPOINT_END, "end of checkpoint", CHECKPOINT_SEQ)
        return ev.CheckpointLoaded(item.size)

    def _dispatch(self, msg: object, seq: int) -> ev.ProtocolEvent | None:
        """The event for one message; None for a batch, whose RPCs are queued instead."""
        kind = type(msg)
        if kind is Rpc:
            replay = self._state in REPLAYING_STATES
            self._receive(Trigger.RECV_RPC, "RPC", seq)
            if replay:
                self.messages_replayed += 1
            return ev.IncomingRpc(msg, seq, replay)  # type: ignore[arg-type]
        if kind is RpcBatch or kind is CountReplayableRpcBatch:
            rpcs = msg.rpcs  # type: ignore[attr-defined]
            self._pending.extendleft((r, seq) for r in reversed(rpcs))
            return None
        if kind is Checkpoint:
            self._receive(Trigger.RECV_CHECKPOINT, "checkpoint record", seq)
            self._recovered = True
            return ev.CheckpointLoadStarted(msg.size)  # type: ignore[attr-defined]
        inp = _MESSAGE_INPUT.get(kind)
        if inp is None:
            self._state = State.ERROR
            raise UnexpectedMessageError(
                f"{kind.__name__} is not a message a binding can receive", seq_id=seq
            )
        before = self._state
        replay = before in REPLAYING_STATES
        after = self._receive(inp, kind.__name__, seq)
        if inp is Trigger.RECV_INITIAL_MESSAGE:
            if replay:
                self.messages_replayed += 1
            return ev.InitialMessageReceived(msg.data, seq, replay)  # type: ignore[attr-defined]
        if inp is Trigger.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT:
            if after is State.FIRST_START:
                return ev.FirstStart()
            self._ckpt_reason = ev.CheckpointReason.BECOMING_PRIMARY
            self._out_events.append(ev.CheckpointRequested(self._ckpt_reason))
            return ev.RecoveryComplete(self.messages_replayed)
        if inp is Trigger.RECV_TAKE_CHECKPOINT:
            self._ckpt_reason = ev.CheckpointReason.PERIODIC
            return ev.CheckpointRequested(self._ckpt_reason)
        if inp is Trigger.RECV_BECOMING_PRIMARY:
            self._out_events.append(ev.BecamePrimary(recovered=True, checkpointed=False))
            return ev.RecoveryComplete(self.messages_replayed)
        if inp is Trigger.RECV_UPGRADE_TAKE_CHECKPOINT:
            self._upgraded = True
            self._ckpt_reason = ev.CheckpointReason.UPGRADE
            self._out_events.append(ev.RecoveryComplete(self.messages_replayed))
            self._out_events.append(ev.CheckpointRequested(self._ckpt_reason))
            return ev.UpgradeRequested(live=True)
        # UpgradeService: an upgrade test; replay goes on with the new code.
        self._upgraded = True
        return ev.UpgradeRequested(live=False)

    # ------------------------------------------------------------ sending
    def send_initial_message(self, data: bytes) -> bytes:
        """First start: the InitialMessage, echoed back later as data record 0."""
        payload = InitialMessage(bytes(data)).encode()
        self._do(Trigger.SEND_INITIAL_MESSAGE)
        self._ckpt_reason = ev.CheckpointReason.FIRST_START
        self._out_events.append(ev.CheckpointRequested(self._ckpt_reason))
        return payload

    def begin_checkpoint(self, size: int) -> bytes:
        """Announce a checkpoint of ``size`` bytes; then send them with ``checkpoint_data``.

        Raises:
            ValueError: ``size`` is negative.
            LocalProtocolError: no checkpoint is owed, or one is already being sent.
        """
        if size < 0:
            raise EncodeError(f"checkpoint size must not be negative, got {size}")
        if self._state is State.ERROR:
            raise LocalProtocolError("the connection is broken by an earlier protocol error")
        if self._state not in CHECKPOINT_OWED:
            raise LocalProtocolError(
                f"no checkpoint is owed in state {self._state.name} ({self._state.value})"
            )
        if self._ckpt_to_send >= 0:
            raise LocalProtocolError("a checkpoint is already being sent")
        header = Checkpoint(size).encode()
        self._ckpt_to_send = size
        if size == 0:
            self._finish_checkpoint()
        return header

    def checkpoint_data(self, chunk: bytes) -> bytes:
        """Raw checkpoint bytes (pass-through), counted against the announced size."""
        if self._ckpt_to_send < 0:
            raise LocalProtocolError("checkpoint bytes sent with no checkpoint announced")
        n = len(chunk)
        if n > self._ckpt_to_send:
            raise LocalProtocolError(
                f"{n} checkpoint bytes exceed the {self._ckpt_to_send} still announced"
            )
        self._ckpt_to_send -= n
        if self._ckpt_to_send == 0:
            self._finish_checkpoint()
        return bytes(chunk)

    def send_checkpoint(self, data: bytes) -> bytes:
        """A whole checkpoint in one call: the Checkpoint message and its bytes."""
        header = self.begin_checkpoint(len(data))
        if not data:
            return header
        return header + self.checkpoint_data(data)

    def _finish_checkpoint(self) -> None:
        self._ckpt_to_send = -1
        before = self._state
        after = self._do(Trigger.CHECKPOINT_SENT)
        if after is State.PRIMARY and before in (
            State.BECOMING_PRIMARY_CHECKPOINT,
            State.UPGRADE_CHECKPOINT,
        ):
            self._out_events.append(ev.BecamePrimary(recovered=self._recovered, checkpointed=True))

    def request_checkpoint(self) -> bytes:
        """Ask the coordinator to take a checkpoint now (it answers with TakeCheckpoint)."""
        self._do(Trigger.REQUEST_CHECKPOINT)
        return _REQUEST_CHECKPOINT

    def _prepare(self, rpc: OutgoingRpc, attaching: list[str]) -> bytes:
        """Check one outgoing RPC and encode it; names still to attach go to ``attaching``.

        Changes nothing, so a batch refused halfway leaves no trace.
        """
        dest = "" if rpc.destination == self.instance_name else rpc.destination
        impulse = rpc.rpc_type == RpcType.IMPULSE and not rpc.reserved
        what = f"method {rpc.method_id} to {dest or 'self'}"
        self._refuse_if_illegal(Trigger.SEND_IMPULSE if impulse else Trigger.SEND_RPC, what)
        body = encode_outgoing_rpc(dest, rpc.method_id, rpc.rpc_type, rpc.args, rpc.reserved)
        if dest and dest not in self._attached and dest not in attaching:
            attaching.append(dest)
        return body

    def _commit_send(self, impulse: bool, attaching: list[str]) -> bytes:
        self._do(Trigger.SEND_IMPULSE if impulse else Trigger.SEND_RPC)
        self._attached.update(attaching)
        return b"".join(AttachTo(d).encode() for d in attaching)

    def send_rpc(
        self, destination: str, method_id: int, rpc_type: int, args: bytes, reserved: int = 0
    ) -> bytes:
        """One outgoing RPC, preceded by ``AttachTo`` the first time ``destination`` is named.

        ``destination`` is the callee's instance name; "" or this instance's own name is a
        self-call (never attached). A return value (``reserved`` non-zero) is not an Impulse.

        Raises:
            ImpulseDuringRecoveryError: an Impulse before the instance is primary.
            LocalProtocolError: an RPC while a checkpoint is owed or before start-up is done.
        """
        rpc = OutgoingRpc(destination, method_id, rpc_type, bytes(args), reserved)
        attaching: list[str] = []
        body = self._prepare(rpc, attaching)
        impulse = rpc_type == RpcType.IMPULSE and not reserved
        return self._commit_send(impulse, attaching) + body

    def send_rpcs(self, rpcs: Iterable[OutgoingRpc]) -> bytes:
        """Several outgoing RPCs; two or more travel as one RPCBatch message.

        Every ``AttachTo`` the batch needs goes out first. All or nothing: if one RPC is
        refused, nothing is sent and nothing changes.
        """
        attaching: list[str] = []
        bodies: list[bytes] = []
        impulse = False
        for r in rpcs:
            bodies.append(self._prepare(r, attaching))
            impulse = impulse or (r.rpc_type == RpcType.IMPULSE and not r.reserved)
        if not bodies:
            return b""
        attach = self._commit_send(impulse, attaching)
        if len(bodies) == 1:
            return attach + bodies[0]
        data = encode_zz32(len(bodies)) + b"".join(bodies)
        return attach + encode_zz32(len(data) + 1) + _RPC_BATCH_BYTE + data
