"""The receive side of ``BindingConnection``: coordinator bytes in, typed events out.

Log records are decoded and their messages queued; each message is checked against the
transition table and becomes an event. Nothing is dispatched while a checkpoint is owed.
"""

from __future__ import annotations

from collections.abc import Iterator

from ambrosia_core.errors import LocalProtocolError, RemoteProtocolError, UnexpectedMessageError
from ambrosia_core.wire import (
    CHECKPOINT_SEQ,
    NEED_DATA,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    CountReplayableRpcBatch,
    InitialMessage,
    NeedData,
    Rpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    UpgradeService,
    UpgradeTakeCheckpoint,
)
from ambrosia_core.wire import TakeCheckpoint as TakeCheckpointMsg

from . import events as ev
from ._core import ConnectionCore
from ._state import CHECKPOINT_OWED, REPLAYING_STATES, TRANSITIONS, State, Trigger

__all__ = ["ReceiveSide"]

_MESSAGE_INPUT = {
    TakeBecomingPrimaryCheckpoint: Trigger.RECV_TAKE_BECOMING_PRIMARY_CHECKPOINT,
    TakeCheckpointMsg: Trigger.RECV_TAKE_CHECKPOINT,
    BecomingPrimary: Trigger.RECV_BECOMING_PRIMARY,
    UpgradeTakeCheckpoint: Trigger.RECV_UPGRADE_TAKE_CHECKPOINT,
    UpgradeService: Trigger.RECV_UPGRADE_SERVICE,
    InitialMessage: Trigger.RECV_INITIAL_MESSAGE,
    Rpc: Trigger.RECV_RPC,
}


class ReceiveSide(ConnectionCore):
    """Feeding the connection and reading its events (see ``BindingConnection``)."""

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes from the coordinator's send port (copied: the caller may reuse them)."""
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

    def next_rpcs(self) -> list[Rpc]:
        """The incoming RPCs next in log order, as one list, as long as each leaves the
        state as it is (replaying, or primary): what ``next_event`` would return one by
        one as ``IncomingRpc`` events, with the same checks, the same count of replayed
        messages and the same errors, for one call per chunk of records instead of one
        event per message. Empty when the next event is anything else: call
        ``next_event`` then. Raises ``RemoteProtocolError`` on bad input, as
        ``next_event`` does, once the RPCs before it have been returned.
        """
        out: list[Rpc] = []
        state = self._state
        if (self._out_events or state in CHECKPOINT_OWED
                or TRANSITIONS[state].get(Trigger.RECV_RPC) is not state):
            return out
        pending = self._pending
        while pending and type(pending[0][0]) is Rpc:
            out.append(pending.popleft()[0])  # type: ignore[arg-type]
        decoder = self._decoder
        while not pending:
            if self.committer_id is not None and decoder.take_incoming_rpcs(out):
                self.last_seq_id = decoder.last_seq_id
            try:
                item = decoder.next_event()
            except RemoteProtocolError:
                if out:
                    break  # the decoder keeps the error: the next call raises it
                self._state = State.ERROR
                raise
            if item is NEED_DATA:
                break
            assert not isinstance(item, (CheckpointChunk, CheckpointEnd, NeedData))
            if self.committer_id is None:
                self.committer_id = item.committer_id
            seq = item.seq_id
            if seq >= 0:
                self.last_seq_id = seq
            messages = item.messages
            taken = 0
            for m in messages:
                if type(m) is not Rpc:
                    break
                taken += 1
            if taken == len(messages):
                out += messages  # type: ignore[arg-type]
            else:
                out += messages[:taken]  # type: ignore[arg-type]
                pending.extend((m, seq) for m in messages[taken:])
        if state in REPLAYING_STATES:
            self.messages_replayed += len(out)
        return out

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
