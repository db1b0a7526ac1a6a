"""The streams of one connection: their states and message ids, checked, then recorded.

``StreamBook`` walks ``STREAM_TRANSITIONS`` for every frame that names a stream and keeps
the last MESSAGE id of each stream since its NOTIFY_ACK. Checking (``changes``,
``check_message_id``) changes nothing; ``record`` keeps what a frame that passed every
rule did, so that a refused frame leaves the connection as it was. A broken rule is a
``RuleError``, which the connection turns into the peer's or this side's fault.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from ._state import STREAM_TRANSITIONS, Role, StreamInput, StreamState
from .errors import (
    ConnectorRemoteError,
    MessageIdRegressionError,
    StreamNotNotifiedError,
    TwoPCOrderError,
    UnexpectedFrameError,
)
from .frames import (
    Ack,
    ConnectionClosed,
    EosMessage,
    ErrorFrame,
    Frame,
    Hello,
    Message,
    Notify,
    NotifyAck,
    Ok,
    Restart,
)
from .twopc import TWOPC_STREAM_ID, TwoPCMessage, TwoPCSession

__all__ = ["FRAME_NAMES", "Event", "RuleError", "StreamBook", "event_name"]

Event = Frame | TwoPCMessage | ConnectionClosed
FRAME_NAMES: Final = MappingProxyType(
    {
        Hello: "HELLO",
        Ok: "OK",
        ErrorFrame: "ERROR",
        Notify: "NOTIFY",
        NotifyAck: "NOTIFY_ACK",
        Message: "MESSAGE",
        Ack: "ACK",
        Restart: "RESTART",
        EosMessage: "EOS_MESSAGE",
    }
)


def event_name(event: object) -> str:
    """The frame type's name as the protocol writes it, or ``2PC`` and the message class."""
    return FRAME_NAMES.get(type(event)) or f"2PC {type(event).__name__}"


class RuleError(Exception):
    """A rule broken by a frame, before we know whose fault it is."""

    def __init__(self, kind: type[ConnectorRemoteError], reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class StreamBook:
    """The state and the last message id of every stream NOTIFYed on one connection.

    Args:
        twopc: a sink link, whose stream 0 carries 2PC messages and is never NOTIFYed.
        session: the link's 2PC order, which forbids data MESSAGEs inside a round.
    """

    def __init__(self, twopc: bool, session: TwoPCSession | None) -> None:
        self.twopc = twopc
        self.session = session
        self.states: dict[int, StreamState] = {}
        self.last_ids: dict[int, int] = {}  # last MESSAGE id per stream since its NOTIFY_ACK

    def changes(self, event: Event, sender: Role) -> dict[int, StreamState]:
        """The stream states ``event`` leads to, checked against the stream table."""
        match event:
            case Notify(stream_id):
                if self.twopc and stream_id == TWOPC_STREAM_ID:
                    raise RuleError(
                        UnexpectedFrameError,
                        "NOTIFY of stream 0, which a sink link keeps for 2PC messages",
                    )
                return self._step(stream_id, StreamInput.NOTIFY, sender, event)
            case NotifyAck(success, stream_id):
                inp = StreamInput.NOTIFY_ACCEPTED if success else StreamInput.NOTIFY_REFUSED
                return self._step(stream_id, inp, sender, event)
            case Message(stream_id):
                if self.session is not None:
                    try:
                        self.session.check_data(stream_id)
                    except ValueError as e:
                        raise RuleError(TwoPCOrderError, str(e)) from None
                return self._step(stream_id, StreamInput.MESSAGE, sender, event)
            case EosMessage(stream_id):
                return self._step(stream_id, StreamInput.EOS, sender, event)
            case Ack(_, acks):
                out: dict[int, StreamState] = {}
                for stream_id, _por in acks:
                    out.update(self._step(stream_id, StreamInput.ACK, sender, event))
                return out
            case Restart():
                # Every stream ends; a stream in START has nothing to end.
                table = STREAM_TRANSITIONS[sender]
                return {
                    sid: table[st].get(StreamInput.RESTART, st) for sid, st in self.states.items()
                }
        return {}

    def _step(
        self, stream_id: int, inp: StreamInput, sender: Role, event: Event
    ) -> dict[int, StreamState]:
        state = self.states.get(stream_id, StreamState.START)
        nxt = STREAM_TRANSITIONS[sender][state].get(inp)
        if nxt is not None:
            return {stream_id: nxt}
        if state is StreamState.START and inp in (StreamInput.MESSAGE, StreamInput.EOS):
            raise RuleError(
                StreamNotNotifiedError,
                f"{event_name(event)} on stream {stream_id}, which was never NOTIFYed",
            )
        raise RuleError(
            UnexpectedFrameError,
            f"{inp.value} from the {sender.name.lower()} is not allowed on stream "
            f"{stream_id} in state {state.name} ({state.value})",
        )

    def check_message_id(self, msg: Message) -> None:
        """Message ids rise strictly on each stream, counted from its last NOTIFY_ACK."""
        last = self.last_ids.get(msg.stream_id)
        if last is not None and msg.message_id <= last:
            raise RuleError(
                MessageIdRegressionError,
                f"MESSAGE id {msg.message_id} on stream {msg.stream_id} does not rise "
                f"above the previous id {last}",
            )

    def record(self, event: Event, states: dict[int, StreamState]) -> None:
        """Keep what ``event``, which passed every rule, did to the streams."""
        self.states.update(states)
        match event:
            case NotifyAck(True, stream_id):
                self.last_ids.pop(stream_id, None)  # a resumed stream may go back
            case Message(stream_id, message_id):
                self.last_ids[stream_id] = message_id
