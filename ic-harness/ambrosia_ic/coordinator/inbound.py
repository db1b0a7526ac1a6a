"""One inbound link's rules, with no I/O: the receiver's side of the handshake, the
admission of the sender it names, then its records until the link breaks.

``InboundLink`` is fed what happens (``start``, ``receive``, ``answer``, ``timed_out``,
``broken``, ``closed``) and returns what to do (the actions below). The link server runs
it over an asyncio transport, with one timer and a registration lookup; the simulator
runs it over its simulated connections. Its rules:

- The receiver speaks first (``challenge``) and gives the sender ``HANDSHAKE_TIMEOUT``
  seconds to prove itself and be admitted; a hello that does not check, or that is still
  incomplete at ``HELLO_MAX`` bytes, is refused in one line.
- A sender that proved itself is admitted only once the shell answers whether it may link
  (``Ask``: a lookup that can take time); the reply names how far its calls are logged as
  of the answer. Bytes that came behind the hello are its first records.
- A standby's watch (``WATCH_SENDER``) is answered with the epoch the primary holds, and
  then held open, read only to see it close; a replica that holds no epoch refuses it.
- Records are handed on in order; a link that breaks the protocol is dropped with one
  line (the sender reconnects and resends from the position acknowledged), and one that
  stops inside a record for ``stall_seconds`` is dropped too.
"""

from __future__ import annotations

import enum

import attrs

from ambrosia_core.errors import RemoteProtocolError
from ambrosia_ic.errors import LinkAuthenticationError

from ..links.handshake import (
    HANDSHAKE_TIMEOUT,
    HELLO_MAX,
    Hello,
    challenge,
    check_hello,
    hello_reply,
    not_registered,
)
from .frames import LinkRecord, LinkRecords

__all__ = ["STALL_SECONDS", "WATCH_SENDER", "Arm", "Ask", "Close", "Disarm", "InboundAction",
           "InboundLink", "Joined", "Left", "Log", "Records", "Send", "Unwatched", "Watching"]

# A linked sender that began a record and then sends nothing for this long is closed (it
# reconnects and sends again from the position acknowledged); idle between records is fine.
STALL_SECONDS = 30.0

# The sender name of a standby's watch on the primary (``replication.watch``): never an
# instance's, whose names start with a letter or a digit.
WATCH_SENDER = "#watch"


@attrs.frozen
class Send:
    """Write these bytes to the peer."""

    data: bytes


@attrs.frozen
class Close:
    """Close the connection (after the bytes already written)."""


@attrs.frozen
class Log:
    """Log this line."""

    line: str


@attrs.frozen
class Arm:
    """(Re)start the link's one timer: ``timed_out`` when it fires."""

    seconds: float


@attrs.frozen
class Disarm:
    """Stop the link's timer."""


@attrs.frozen
class Ask:
    """May ``sender`` link? Answer with ``answer``: for a sender, how far its calls are
    logged (None: not registered); for a watch, the epoch held (None: none)."""

    sender: str
    watch: bool


@attrs.frozen
class Joined:
    """``sender`` is linked on this connection: acknowledge its calls here, and pause
    reading it with the others under back-pressure."""

    sender: str


@attrs.frozen
class Left:
    """``sender``'s link on this connection is gone."""

    sender: str


@attrs.frozen
class Watching:
    """This connection is a standby's watch: close it when the standbys may claim."""


@attrs.frozen
class Unwatched:
    """The watch on this connection is gone."""


@attrs.frozen
class Records:
    """Hand these records of ``sender`` on, in order, then commit what they brought (a
    record that breaks the protocol there: ``broken``)."""

    sender: str
    records: list[LinkRecord]


InboundAction = Send | Close | Log | Arm | Disarm | Ask | Joined | Left | Watching | \
    Unwatched | Records


class _Stage(enum.Enum):
    HELLO = "hello"  # the sender's hello is awaited
    ASKING = "asking"  # proved; whether it may link is asked
    LINKED = "linked"  # records flow
    WATCHING = "watching"  # a standby's watch, held open
    ENDED = "ended"  # refused, dropped or closed: nothing more is read


class InboundLink:
    """One inbound connection's rules (see the module's docstring).

    Args:
        secret: the registry's link secret.
        name: this instance's name (the one a sender must want).
        peer: the peer's address, as the refusals name it.
        stall_seconds: how long a sender may stop inside a record.
    """

    def __init__(self, secret: bytes, name: str, peer: str,
                 stall_seconds: float = STALL_SECONDS) -> None:
        self.secret = secret
        self.name = name
        self.peer = peer
        self.stall_seconds = stall_seconds
        self.sender: str | None = None  # once joined (also after it was dropped)
        self._stage = _Stage.HELLO
        self._nonce_s = b""
        self._hello_buf = bytearray()
        self._hello: Hello | None = None
        self._records = LinkRecords()

    @property
    def ended(self) -> bool:
        return self._stage is _Stage.ENDED

    def start(self) -> list[InboundAction]:
        """The connection is up: the challenge, and the handshake's time starts."""
        first, self._nonce_s = challenge()
        return [Send(first), Arm(HANDSHAKE_TIMEOUT)]

    def receive(self, data: bytes) -> list[InboundAction]:
        """Bytes read from the peer."""
        stage = self._stage
        if stage is _Stage.LINKED:
            assert self.sender is not None
            return self._take(self.sender, data)
        if stage is _Stage.ASKING:
            self._hello_buf += data  # kept until the sender is admitted
            return []
        if stage is not _Stage.HELLO:
            return []  # a watch sends nothing after its hello; an ended link is closing
        self._hello_buf += data
        try:
            got = check_hello(self._hello_buf, self._nonce_s, self.secret, self.name)
            if got is None and len(self._hello_buf) >= HELLO_MAX:
                raise LinkAuthenticationError("malformed link handshake")
        except LinkAuthenticationError as err:
            return self._refuse(str(err))
        if got is None:
            return []
        self._hello = got
        self._stage = _Stage.ASKING
        return [Ask(got.sender, got.sender == WATCH_SENDER)]

    def answer(self, position: int | None) -> list[InboundAction]:
        """The answer to ``Ask`` (see there)."""
        if self._stage is not _Stage.ASKING:
            return []  # refused meanwhile (the handshake's time ran out, or the peer left)
        hello = self._hello
        assert hello is not None
        watch = hello.sender == WATCH_SENDER
        if position is None:
            return self._refuse(
                "a standby's watch, but this replica is not the primary" if watch
                else str(not_registered(hello.sender)))
        reply = hello_reply(self.secret, hello, self._nonce_s, position)
        rest = bytes(self._hello_buf[hello.used:])
        self._hello_buf = bytearray()
        if watch:
            self._stage = _Stage.WATCHING
            return [Disarm(), Send(reply), Watching()]
        self._stage = _Stage.LINKED
        self.sender = hello.sender
        actions: list[InboundAction] = [Disarm(), Send(reply), Joined(hello.sender)]
        if rest:
            actions += self._take(hello.sender, rest)
        return actions

    def timed_out(self) -> list[InboundAction]:
        """The link's timer fired."""
        if self._stage in (_Stage.HELLO, _Stage.ASKING):
            return self._refuse("TimeoutError")
        if self._stage is _Stage.LINKED:
            self._stage = _Stage.ENDED
            return [Log(f"link from {self.sender} sent part of a record and nothing more "
                        f"for {self.stall_seconds:g} s; closed (it sends again from the "
                        "position acknowledged)"), Close()]
        return []

    def broken(self, err: RemoteProtocolError) -> list[InboundAction]:
        """A record handed on broke the protocol where it was taken (a gap in the calls)."""
        if self._stage is not _Stage.LINKED:
            return []
        return self._drop(err)

    def closed(self, tls_error: str | None = None) -> list[InboundAction]:
        """The connection is gone (``tls_error``: TLS said why, in words)."""
        stage, self._stage = self._stage, _Stage.ENDED
        if stage in (_Stage.HELLO, _Stage.ASKING):
            return self._refuse("the peer closed during the link handshake")
        actions: list[InboundAction] = [Disarm()]
        if stage is _Stage.WATCHING:
            actions.append(Unwatched())
        if self.sender is not None:
            if tls_error is not None:
                actions.append(Log(f"link from {self.sender} closed: {tls_error}"))
            actions.append(Left(self.sender))
            self.sender = None
        return actions

    def _take(self, sender: str, data: bytes) -> list[InboundAction]:
        try:
            records = self._records.receive_data(data)
        except RemoteProtocolError as err:  # a broken record
            return self._drop(err)
        # The rest of a record begun must follow in time; idle between records is fine.
        return [Records(sender, records),
                Arm(self.stall_seconds) if self._records.partial else Disarm()]

    def _drop(self, err: RemoteProtocolError) -> list[InboundAction]:
        self._stage = _Stage.ENDED
        return [Log(f"link from {self.sender} broke the protocol: {err}"), Disarm(), Close()]

    def _refuse(self, why: str) -> list[InboundAction]:
        self._stage = _Stage.ENDED
        return [Log(f"refused a link from {self.peer}: {why}"), Disarm(), Close()]
