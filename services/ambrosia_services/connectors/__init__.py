"""The Wallaroo connector protocol v3, sans-IO: frames, 2PC messages and the connection
state machine for both roles. No sockets here; a transport calls ``receive_data``,
``next_event`` and ``send`` on a ``ConnectorConnection``. See README.md beside this file."""

from typing import TYPE_CHECKING, Any

from ambrosia_core.wire import NEED_DATA, NeedData

from ._state import (
    CONNECTION_TRANSITIONS,
    STREAM_TRANSITIONS,
    ConnectionState,
    Role,
    StreamInput,
    StreamState,
)
from .connection import SINK_VERSION, SOURCE_VERSION, ConnectorConnection, Event
from .errors import (
    ConnectionBrokenError,
    ConnectorLocalError,
    ConnectorProtocolError,
    ConnectorRemoteError,
    FrameFormatError,
    FrameTooLargeError,
    HandshakeError,
    IllegalSendError,
    MessageIdRegressionError,
    StreamNotNotifiedError,
    TwoPCOrderError,
    UnexpectedFrameError,
    UnknownFrameTypeError,
)
from .frame_codec import decode_frame, encode_frame
from .frame_reader import DEFAULT_MAX_FRAME_SIZE, FrameReader, RawFrame
from .frames import (
    POINT_OF_REFERENCE_FROM_START,
    Ack,
    ConnectionClosed,
    EosMessage,
    ErrorFrame,
    Frame,
    FrameTag,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    OkCredit,
    OkSource,
    Restart,
)
from .twopc import (
    TWOPC_STREAM_ID,
    ListUncommitted,
    Phase1,
    Phase2,
    ReplyUncommitted,
    TwoPCMessage,
    TwoPCReply,
    TwoPCTag,
    Where,
    WorkersLeft,
    decode_twopc,
    encode_twopc,
    twopc_message,
)

__all__ = [
    # the connection and its state tables
    "ConnectorConnection",
    "Event",
    "NEED_DATA",
    "NeedData",
    "Role",
    "ConnectionState",
    "StreamState",
    "StreamInput",
    "CONNECTION_TRANSITIONS",
    "STREAM_TRANSITIONS",
    "SOURCE_VERSION",
    "SINK_VERSION",
    # frames and their codec
    "Hello",
    "Ok",
    "OkCredit",
    "OkSource",
    "ErrorFrame",
    "Notify",
    "NotifyAck",
    "Message",
    "Ack",
    "Restart",
    "EosMessage",
    "ConnectionClosed",
    "Frame",
    "FrameTag",
    "FrameReader",
    "RawFrame",
    "encode_frame",
    "decode_frame",
    "DEFAULT_MAX_FRAME_SIZE",
    "POINT_OF_REFERENCE_FROM_START",
    # 2PC messages (inside MESSAGE frames on stream 0 of a sink link)
    "ListUncommitted",
    "ReplyUncommitted",
    "Phase1",
    "TwoPCReply",
    "Phase2",
    "WorkersLeft",
    "Where",
    "TwoPCMessage",
    "TwoPCTag",
    "TWOPC_STREAM_ID",
    "encode_twopc",
    "decode_twopc",
    "twopc_message",
    # errors
    "ConnectorProtocolError",
    "ConnectorRemoteError",
    "ConnectorLocalError",
    "FrameFormatError",
    "FrameTooLargeError",
    "UnknownFrameTypeError",
    "HandshakeError",
    "UnexpectedFrameError",
    "StreamNotNotifiedError",
    "MessageIdRegressionError",
    "TwoPCOrderError",
    "IllegalSendError",
    "ConnectionBrokenError",
    # the coordinator (an immortal service built on this library)
    "ConnectorCoordinator",
    "CoordinatorConfig",
]


# The coordinator, an immortal built on the modules above, is loaded on first use: a
# process that speaks the protocol only (the standalone sink, a feed) does not load it.
if TYPE_CHECKING:
    from .coordinator import ConnectorCoordinator, CoordinatorConfig


def __getattr__(name: str) -> Any:
    if name in ("ConnectorCoordinator", "CoordinatorConfig"):
        from . import coordinator

        value = getattr(coordinator, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
