"""Errors of the Wallaroo connector protocol library, each saying whose fault it was.

They extend the project's hierarchy (``ambrosia_py.errors``): a peer's bad bytes or bad
order raise a ``ConnectorRemoteError`` (a ``RemoteProtocolError``), a frame this side tried
to send when the protocol forbids it raises a ``ConnectorLocalError`` (a
``LocalProtocolError``). Either one breaks the connection; its ``reason`` is the one line
that goes into the ERROR frame the connection then offers to send.
"""

from __future__ import annotations

from ambrosia_core.errors import FrameTooLargeError as _WireFrameTooLargeError
from ambrosia_core.errors import LocalProtocolError, ProtocolError, RemoteProtocolError

__all__ = [
    "ConnectionBrokenError",
    "ConnectorLocalError",
    "ConnectorProtocolError",
    "ConnectorRemoteError",
    "FrameFormatError",
    "FrameTooLargeError",
    "HandshakeError",
    "IllegalSendError",
    "MessageIdRegressionError",
    "StreamNotNotifiedError",
    "TwoPCOrderError",
    "UnexpectedFrameError",
    "UnknownFrameTypeError",
]


class ConnectorProtocolError(ProtocolError):
    """The Wallaroo connector protocol was broken; the connection cannot go on.

    Attributes:
        reason: one line naming the cause, without location (it becomes the ERROR frame).
    """

    reason: str


class ConnectorRemoteError(ConnectorProtocolError, RemoteProtocolError):
    """The peer sent bytes that break the frame format or the protocol's order.

    ``offset`` is the stream offset of the offending frame's first byte (its length field),
    ``message_type`` its frame tag when known.
    """


class FrameFormatError(ConnectorRemoteError):
    """A frame that cannot be decoded: cut short, trailing bytes, bad UTF-8, bad flag byte."""


class FrameTooLargeError(FrameFormatError, _WireFrameTooLargeError):
    """A frame's length field claims more than the configured maximum frame size."""


class UnknownFrameTypeError(FrameFormatError):
    """A frame tag (or a 2PC inner tag) that the protocol does not define."""


class HandshakeError(ConnectorRemoteError):
    """The peer's HELLO carried a version or cookie this side does not accept."""


class UnexpectedFrameError(ConnectorRemoteError):
    """A well-formed frame arrived in a connection or stream state where it is not allowed."""


class StreamNotNotifiedError(UnexpectedFrameError):
    """A MESSAGE or EOS_MESSAGE named a stream that was never NOTIFYed on this connection."""


class MessageIdRegressionError(ConnectorRemoteError):
    """A MESSAGE's id did not rise above the previous one on its stream."""


class TwoPCOrderError(UnexpectedFrameError):
    """A 2PC message out of order: a reply nobody asked for, data inside a 2PC round, ..."""


class ConnectorLocalError(ConnectorProtocolError, LocalProtocolError):
    """This side misused the protocol; nothing was sent."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class IllegalSendError(ConnectorLocalError):
    """This side tried to send a frame the protocol forbids in the current state."""


class ConnectionBrokenError(ConnectorLocalError):
    """The connection was used after an error or an ERROR frame broke it."""
