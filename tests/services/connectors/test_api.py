"""The package's public names, pinned: adding or removing one is a deliberate change."""

from __future__ import annotations

import ambrosia_services.connectors as connectors

PUBLIC = [
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
    "ConnectorCoordinator",
    "CoordinatorConfig",
]


def test_all_is_pinned() -> None:
    assert connectors.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(connectors, name) is not None


def test_constants() -> None:
    assert connectors.SOURCE_VERSION == "0.0.1"
    assert connectors.SINK_VERSION == "v0.0.1"
    assert connectors.DEFAULT_MAX_FRAME_SIZE == 4 * 1024 * 1024
    assert connectors.POINT_OF_REFERENCE_FROM_START == 2**64 - 1
    assert connectors.TWOPC_STREAM_ID == 0
    assert [int(t) for t in connectors.FrameTag] == list(range(9))
    assert [int(t) for t in connectors.TwoPCTag] == [201, 202, 203, 204, 205, 206]


def test_errors_say_whose_fault() -> None:
    from ambrosia_core.errors import LocalProtocolError, RemoteProtocolError

    for name in ("FrameFormatError", "FrameTooLargeError", "UnknownFrameTypeError",
                 "HandshakeError", "UnexpectedFrameError", "StreamNotNotifiedError",
                 "MessageIdRegressionError", "TwoPCOrderError"):
        cls = getattr(connectors, name)
        assert issubclass(cls, RemoteProtocolError) and not issubclass(cls, LocalProtocolError)
    for name in ("IllegalSendError", "ConnectionBrokenError"):
        cls = getattr(connectors, name)
        assert issubclass(cls, LocalProtocolError) and not issubclass(cls, RemoteProtocolError)


def test_frames_are_frozen_and_validate() -> None:
    import attrs
    import pytest

    m = connectors.Message(1, 2, b"x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        m.stream_id = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"Message.stream_id must be an int in \[0, "):
        connectors.Message(-1, 2)
    with pytest.raises(TypeError, match=r"Message\.payload must be bytes"):
        connectors.Message(1, 2, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"NotifyAck\.success must be bool"):
        connectors.NotifyAck(1, 2, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Hello\.program_name is over 65535 bytes in UTF-8"):
        connectors.Hello("0.0.1", b"", "x" * 65536, "i")
    with pytest.raises(ValueError, match="lone surrogate"):
        connectors.ErrorFrame("\udc80")
    with pytest.raises(ValueError, match=r"Ack\.acks entries must be pairs of U64 ints"):
        connectors.Ack(1, ((1, -1),))
    with pytest.raises(TypeError, match="is not a connector protocol frame"):
        connectors.encode_frame(connectors.ListUncommitted(1))  # type: ignore[arg-type]
