"""The send side of ``BindingConnection``: the binding's intents in, bytes out.

The initial message, checkpoints (whole or streamed), checkpoint requests and outgoing
RPCs with their ``AttachTo``. A refused intent emits no bytes and changes no state.
"""

from __future__ import annotations

from collections.abc import Iterable

from ambrosia_core.errors import EncodeError, LocalProtocolError
from ambrosia_core.wire import (
    Checkpoint,
    InitialMessage,
    MessageType,
    OutgoingRpc,
    RpcType,
    encode_outgoing_rpc,
    encode_zz32,
)
from ambrosia_core.wire import TakeCheckpoint as TakeCheckpointMsg
from ambrosia_core.wire.messages import AttachTo

from . import events as ev
from ._core import ConnectionCore
from ._state import CHECKPOINT_OWED, TRANSITIONS, State, Trigger

__all__ = ["SendSide"]

_REQUEST_CHECKPOINT = TakeCheckpointMsg().encode()
_RPC_BATCH_BYTE = bytes((MessageType.RPC_BATCH,))


class SendSide(ConnectionCore):
    """The binding's intents, each returning the bytes to write (see ``BindingConnection``)."""

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
        trigger = Trigger.SEND_IMPULSE if impulse else Trigger.SEND_RPC
        if trigger not in TRANSITIONS[self._state]:  # the message only when refused
            self._refuse_if_illegal(trigger, f"method {rpc.method_id} to {dest or 'self'}")
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

    def send_frames(self, frames: list[bytes], destinations: Iterable[str]) -> bytes:
        """Outgoing RPCs that are not Impulses, already encoded in the outgoing form
        (``encode_outgoing_rpc``, or ``sized(outgoing_rpc_head(...) + args)``), with a
        self-call's destination left empty: the bytes ``send_rpcs`` makes of the same
        RPCs. ``destinations`` names the others' destinations, each at least once.

        For a sender that encodes each call as it is made rather than building an
        ``OutgoingRpc`` and encoding it here. All or nothing, as ``send_rpcs``.

        Raises:
            LocalProtocolError: RPCs while a checkpoint is owed or before start-up is done.
        """
        if not frames:
            return b""
        self._refuse_if_illegal(Trigger.SEND_RPC, f"{len(frames)} RPCs")
        attached = self._attached
        attach = self._commit_send(False, [d for d in dict.fromkeys(destinations)
                                           if d and d not in attached])
        if len(frames) == 1:
            return attach + frames[0]
        data = encode_zz32(len(frames)) + b"".join(frames)
        return attach + encode_zz32(len(data) + 1) + _RPC_BATCH_BYTE + data

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
