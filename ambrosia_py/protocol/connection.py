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

from ._receive_side import ReceiveSide
from ._send_side import SendSide

__all__ = ["BindingConnection"]


class BindingConnection(ReceiveSide, SendSide):
    """One binding's conversation with its coordinator, from connect to close.

    Args:
        instance_name: this instance's registered name; an RPC to it is a self-call.
        max_frame_size: bound on a single log record from the coordinator.
        verify_checksums: check XXH64 of data records (the real bindings do not; ours do).
    """
