"""One connection of the Wallaroo connector protocol v3, either role, sans-IO.

``ConnectorConnection`` holds no socket. Its whole I/O surface is three calls::

    conn.receive_data(chunk)        # bytes from the socket; b"" when the peer closed
    event = conn.next_event()       # a frame, a 2PC message, ConnectionClosed or NEED_DATA
    data = conn.send(event)         # the bytes to write for a frame or 2PC message

Every frame, sent or received, walks the connection and stream state tables of
``_state``; message ids must rise on each stream; with ``twopc=True`` (a sink link)
MESSAGEs on stream 0 carry 2PC messages, which are delivered and sent as
``twopc.TwoPCMessage`` objects and checked by ``twopc.TwoPCSession``.

Whose fault: a received frame that breaks the rules raises a ``ConnectorRemoteError``
subclass; a frame this side tries to send against the rules raises ``IllegalSendError``
(and nothing is sent). Either one puts the connection in ERROR: it refuses to go on
(``ConnectionBrokenError``), discards whatever arrives afterwards, and
``take_error_frame()`` returns the ERROR frame to write before closing the transport.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Final

from ambrosia_core.wire import NEED_DATA, NeedData

from ._state import (
    CONNECTION_TRANSITIONS,
    ConnectionState,
    Role,
    StreamState,
)
from .errors import (
    ConnectionBrokenError,
    ConnectorProtocolError,
    FrameFormatError,
    HandshakeError,
    IllegalSendError,
    TwoPCOrderError,
    UnexpectedFrameError,
)
from .fields import U16_MAX
from .frame_codec import decode_frame, encode_frame
from .frame_reader import DEFAULT_MAX_FRAME_SIZE, FrameReader
from .frames import (
    Ack,
    ConnectionClosed,
    ErrorFrame,
    Hello,
    Message,
    Ok,
)
from .streams import FRAME_NAMES, Event, RuleError, StreamBook, event_name
from .twopc import (
    TWOPC_STREAM_ID,
    TWOPC_TYPES,
    TwoPCSession,
    decode_twopc,
    twopc_message,
)

__all__ = ["SINK_VERSION", "SOURCE_VERSION", "ConnectorConnection", "Event"]

SOURCE_VERSION: Final = "0.0.1"  # what source connectors send; Wallaroo's worker accepts only it
SINK_VERSION: Final = "v0.0.1"  # what Wallaroo's sink side sends; real 2PC sinks accept only it


class ConnectorConnection:
    """One connection, from connect to close, seen from one side.

    Args:
        role: ``Role.CONNECTOR`` for the side that sends HELLO and NOTIFY (a source
            connector, or the coordinator's link to a sink), ``Role.WORKER`` for the side
            that answers OK and NOTIFY_ACK (the coordinator's listener, or a sink server).
        cookie: the shared cookie. A HELLO with any other cookie is refused: received, it is
            a ``HandshakeError``; sent, an ``IllegalSendError``. b"" means no cookie, and
            then a HELLO that carries one is refused too.
        versions: the protocol version strings accepted in HELLO (checked the same way).
            Default: ``SINK_VERSION`` for a 2PC sink link, ``SOURCE_VERSION`` otherwise.
        twopc: this is a sink link: MESSAGEs on stream 0 carry 2PC messages and stream 0
            is never NOTIFYed.
        max_frame_size: the largest frame accepted from the peer (its length field).
    """

    def __init__(
        self,
        role: Role,
        *,
        cookie: bytes = b"",
        versions: Collection[str] | None = None,
        twopc: bool = False,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        if not isinstance(role, Role):
            raise TypeError(f"role must be a Role, got {role!r}")
        if type(cookie) is not bytes:
            raise TypeError(f"cookie must be bytes, got {cookie!r}")
        self.role = role
        self.cookie = cookie
        default = SINK_VERSION if twopc else SOURCE_VERSION
        self.versions = frozenset([default] if versions is None else versions)
        if not self.versions:
            raise ValueError("versions must name at least one protocol version")
        self.twopc = twopc
        self._reader = FrameReader(max_frame_size)
        self._state = ConnectionState.CONNECTED
        self._session = TwoPCSession() if twopc else None
        self._streams = StreamBook(twopc, self._session)
        self._eof = False
        self._error: ConnectorProtocolError | None = None
        self._peer_error: str | None = None
        self._error_frame = b""
        self.credits = 0
        """Frames the connector may still send: OK's credits, plus every ACK's, minus
        each frame the connector sent while streaming. Not enforced (Wallaroo's own sink
        side ignored credits); a connector may pace itself by it."""
        self.hello: Hello | None = None
        """The session's HELLO, once sent or received."""
        self.discarded = 0
        """Bytes received after the connection broke or closed, and thrown away."""

    # ---------------------------------------------------------------- queries
    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def partial_frame(self) -> bool:
        """Whether bytes of a frame not yet complete are buffered."""
        return not self._reader.at_boundary

    @property
    def error(self) -> ConnectorProtocolError | None:
        """The error that broke the connection, if one did."""
        return self._error

    @property
    def peer_error(self) -> str | None:
        """The reason of the ERROR frame the peer sent, if it sent one."""
        return self._peer_error

    @property
    def streams(self) -> Mapping[int, StreamState]:
        """Every stream NOTIFYed on this connection and its state (a read-only view)."""
        return MappingProxyType(self._streams.states)

    def stream_state(self, stream_id: int) -> StreamState:
        return self._streams.states.get(stream_id, StreamState.START)

    def last_message_id(self, stream_id: int) -> int | None:
        """The id of the stream's last MESSAGE since its NOTIFY_ACK, if any."""
        return self._streams.last_ids.get(stream_id)

    # ---------------------------------------------------------------- receiving
    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes from the peer; b"" says the peer closed its side.

        Raises:
            ConnectionBrokenError: bytes after the end of input was announced.
        """
        if self._state in (ConnectionState.ERROR, ConnectionState.DISCONNECTED):
            # The protocol says data after ERROR (or RESTART) is discarded.
            self.discarded += len(data)
            return
        if self._eof:
            if not data:
                return  # the end announced again
            raise ConnectionBrokenError("bytes received after the peer closed the connection")
        if not data:
            self._eof = True
            return
        self._reader.receive_data(data)

    def next_event(self) -> Event | NeedData:
        """The next event from the peer, or ``NEED_DATA``.

        Returns ``ConnectionClosed`` once the peer has closed at a frame boundary (and
        again on every later call), or after RESTART.

        Raises:
            ConnectorRemoteError: the peer broke the protocol (the connection is now broken).
            ConnectionBrokenError: the connection was already broken.
        """
        if self._state is ConnectionState.ERROR:
            raise self._broken()
        if self._state is ConnectionState.DISCONNECTED:
            return ConnectionClosed()
        try:
            raw = self._reader.next_frame()
            if isinstance(raw, NeedData):
                return self._at_end_of_input()
        except FrameFormatError as e:  # located already: framing knows the offset
            raise self._break(e) from None
        try:
            event: Event = decode_frame(raw.tag, raw.body)
            if self.twopc and type(event) is Message and event.stream_id == TWOPC_STREAM_ID:
                event = decode_twopc(event.payload)
            self._apply(event, self.role.peer)
        except FrameFormatError as e:
            located = type(e)(e.reason, offset=raw.offset, message_type=raw.tag)
            raise self._break(located) from None
        except RuleError as v:
            raise self._break(v.kind(v.reason, offset=raw.offset, message_type=raw.tag)) from None
        return event

    def _at_end_of_input(self) -> NeedData | ConnectionClosed:
        if not self._eof:
            return NEED_DATA
        if self._reader.at_boundary:
            self._state = ConnectionState.DISCONNECTED
            return ConnectionClosed()
        raise FrameFormatError(
            f"the peer closed the connection in the middle of a frame "
            f"({self._reader.buffered} bytes of it received)",
            offset=self._reader.offset,
        )

    def events(self) -> Iterator[Event]:
        """Every event available now; the last one is ``ConnectionClosed`` or the peer's
        ERROR frame if the connection ended."""
        while self._state is not ConnectionState.ERROR:
            event = self.next_event()
            if isinstance(event, NeedData):
                return
            yield event
            if type(event) is ConnectionClosed:
                return

    # ---------------------------------------------------------------- sending
    def send(self, event: Event) -> bytes:
        """The bytes to write for ``event`` (a frame, a 2PC message or ``ConnectionClosed``).

        ``ConnectionClosed`` says this side closes the transport; it returns b"".

        Raises:
            IllegalSendError: the protocol forbids ``event`` now (the connection is now
                broken; send ``take_error_frame()`` and close).
            ConnectionBrokenError: the connection was already broken.
            TypeError: ``event`` is not something this library can send.
        """
        if self._state is ConnectionState.ERROR:
            raise self._broken()
        kind = type(event)
        if kind is ConnectionClosed:
            self._state = ConnectionState.DISCONNECTED
            return b""
        if kind not in FRAME_NAMES and kind not in TWOPC_TYPES:
            raise TypeError(f"{event!r} is not a connector protocol frame or 2PC message")
        try:
            if self._state is ConnectionState.DISCONNECTED:
                raise RuleError(UnexpectedFrameError, "the connection is closed")
            if kind in TWOPC_TYPES and not self.twopc:
                raise RuleError(
                    UnexpectedFrameError, f"{event_name(event)} needs a 2PC sink link (twopc=True)"
                )
            if self.twopc and isinstance(event, Message) and event.stream_id == TWOPC_STREAM_ID:
                raise RuleError(
                    UnexpectedFrameError, "stream 0 of a sink link carries 2PC messages only"
                )
            self._apply(event, self.role)
        except RuleError as v:
            raise self._break(IllegalSendError(f"cannot send: {v.reason}")) from None
        if isinstance(event, TWOPC_TYPES):
            return encode_frame(twopc_message(event))
        assert not isinstance(event, ConnectionClosed)
        return encode_frame(event)

    def take_error_frame(self) -> bytes:
        """The ERROR frame to write before closing, once (b"" when there is none to send:
        nothing broke, the peer sent ERROR, or this side already sent one)."""
        data, self._error_frame = self._error_frame, b""
        return data

    # ---------------------------------------------------------------- the rules
    def _break(self, err: ConnectorProtocolError) -> ConnectorProtocolError:
        self._state = ConnectionState.ERROR
        self._error = err
        reason = err.reason.encode("utf-8")[:U16_MAX].decode("utf-8", "ignore")
        self._error_frame = encode_frame(ErrorFrame(reason))
        return err

    def _broken(self) -> ConnectionBrokenError:
        if self._error is not None:
            why = self._error.reason
        elif self._peer_error is not None:
            why = f"the peer sent ERROR: {self._peer_error}"
        else:
            why = "this side sent ERROR"
        return ConnectionBrokenError(f"the connection is broken ({why})")

    def _apply(self, event: Event, sender: Role) -> None:
        """Check ``event`` sent by ``sender`` against every rule, then record it.

        Raises ``RuleError`` and changes nothing if a rule is broken.
        """
        kind = type(event)
        state = self._state
        nxt = CONNECTION_TRANSITIONS[sender][state].get(kind)
        if nxt is None:
            raise RuleError(
                UnexpectedFrameError,
                f"{event_name(event)} from the {sender.name.lower()} is not allowed in state "
                f"{state.name} ({state.value})",
            )
        streams = self._streams.changes(event, sender)
        if isinstance(event, Hello):
            self._check_hello(event)
        elif isinstance(event, Message):
            self._streams.check_message_id(event)
        elif isinstance(event, TWOPC_TYPES) and self._session is not None:
            try:
                self._session.check(event)
            except ValueError as e:
                raise RuleError(TwoPCOrderError, str(e)) from None
        # Every check passed: record.
        self._record(event, sender, state, nxt, streams)

    def _record(
        self,
        event: Event,
        sender: Role,
        state: ConnectionState,
        nxt: ConnectionState,
        streams: dict[int, StreamState],
    ) -> None:
        self._state = nxt
        self._streams.record(event, streams)
        if sender is Role.CONNECTOR and state is ConnectionState.STREAMING:
            self.credits -= 1
        match event:
            case Hello():
                self.hello = event
            case Ok(initial_credits):
                self.credits = initial_credits
            case Ack(credits):
                self.credits += credits
            case ErrorFrame(reason) if sender is not self.role:
                self._peer_error = reason
        if self._session is not None and isinstance(event, TWOPC_TYPES):
            self._session.apply(event)

    def _check_hello(self, hello: Hello) -> None:
        if hello.version not in self.versions:
            expected = " or ".join(repr(v) for v in sorted(self.versions))
            raise RuleError(
                HandshakeError,
                f"unexpected protocol version {hello.version!r} in HELLO (expected {expected})",
            )
        if not hmac.compare_digest(hello.cookie, self.cookie):
            raise RuleError(
                HandshakeError,
                "HELLO carries a cookie although none is configured"
                if not self.cookie
                else "HELLO carries a wrong cookie",
            )
