"""The connection and stream state machines of the connector protocol, as plain data.

``CONNECTION_TRANSITIONS[role][state][frame type] -> next state`` and
``STREAM_TRANSITIONS[role][state][stream input] -> next state``, where ``role`` is the role
of the side that *sends* the frame: both ends of a connection walk the same machine, one
looking up its own frames under its own role and the peer's under the peer's role. A
missing entry is a protocol violation (a local error for a frame this side tries to send,
a remote one for a frame received).

Roles: the CONNECTOR sends HELLO, NOTIFY, MESSAGE and EOS_MESSAGE; the WORKER answers with
OK, NOTIFY_ACK, ACK and RESTART. For sources the connector is the user's program and the
worker is Wallaroo (here: the coordinator); for sinks the roles are reversed: the
coordinator connects out as the CONNECTOR and the sink server is the WORKER.

Where the protocol document is unclear, the choice made here:

- A closed stream NOTIFYed again goes to NOTIFY_SENT (the document's diagram), not straight
  to OPEN (its text): every NOTIFY is answered by a NOTIFY_ACK whose point of reference the
  connector must use.
- An ACK may arrive while a stream waits for its NOTIFY_ACK (it can acknowledge messages
  sent before an EOS and a new NOTIFY).
- 2PC messages are connection-level frame types of the STREAMING state (on stream 0, which
  is never NOTIFYed); their order is checked by ``twopc.TwoPCSession``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from .frames import Ack, EosMessage, ErrorFrame, Hello, Message, Notify, NotifyAck, Ok, Restart
from .twopc import ListUncommitted, Phase1, Phase2, ReplyUncommitted, TwoPCReply, WorkersLeft

__all__ = [
    "CONNECTION_TRANSITIONS",
    "STREAM_TRANSITIONS",
    "ConnectionState",
    "Role",
    "StreamInput",
    "StreamState",
]


class Role(enum.Enum):
    """Which half of the protocol a side speaks."""

    CONNECTOR = "connector (sends HELLO, NOTIFY, MESSAGE, EOS_MESSAGE)"
    WORKER = "worker (answers OK, NOTIFY_ACK, ACK, RESTART)"

    @property
    def peer(self) -> Role:
        return Role.WORKER if self is Role.CONNECTOR else Role.CONNECTOR


class ConnectionState(enum.Enum):
    CONNECTED = "connected, no HELLO yet"
    HANDSHAKE = "HELLO sent, waiting for OK"
    STREAMING = "streaming"
    ERROR = "broken by an error (no frame is valid)"
    DISCONNECTED = "closed (by RESTART or the transport)"


class StreamState(enum.Enum):
    START = "never NOTIFYed on this connection"
    NOTIFY_SENT = "NOTIFYed, waiting for NOTIFY_ACK"
    OPEN = "open: MESSAGEs may flow"
    CLOSED = "closed by EOS_MESSAGE or a refused NOTIFY"
    TERMINATED = "terminated by RESTART"


class StreamInput(enum.Enum):
    """What happens to one stream; NOTIFY_ACK splits by its success byte."""

    NOTIFY = "NOTIFY"
    NOTIFY_ACCEPTED = "NOTIFY_ACK (success)"
    NOTIFY_REFUSED = "NOTIFY_ACK (refused)"
    MESSAGE = "MESSAGE"
    EOS = "EOS_MESSAGE"
    ACK = "ACK"
    RESTART = "RESTART"


ConnectionTable = Mapping[Role, Mapping[ConnectionState, Mapping[type, ConnectionState]]]
StreamTable = Mapping[Role, Mapping[StreamState, Mapping[StreamInput, StreamState]]]


def _frozen_table(table: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """A read-only copy, every level of it: the tables are shared by all connections."""
    return MappingProxyType(
        {k: _frozen_table(v) if isinstance(v, Mapping) else v for k, v in table.items()}
    )


# Short aliases keep the tables readable; deleted below so they are not exported.
C, S, I = ConnectionState, StreamState, StreamInput  # noqa: E741

CONNECTION_TRANSITIONS: Final[ConnectionTable] = _frozen_table(
    {
        Role.CONNECTOR: {
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
        Role.WORKER: {
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
)

STREAM_TRANSITIONS: Final[StreamTable] = _frozen_table(
    {
        Role.CONNECTOR: {
            S.START: {I.NOTIFY: S.NOTIFY_SENT},
            S.NOTIFY_SENT: {},
            S.OPEN: {I.MESSAGE: S.OPEN, I.EOS: S.CLOSED},
            S.CLOSED: {I.NOTIFY: S.NOTIFY_SENT},
            S.TERMINATED: {},
        },
        Role.WORKER: {
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
)

del C, S, I
