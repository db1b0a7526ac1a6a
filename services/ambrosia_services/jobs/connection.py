"""One job protocol connection between two members, sans-IO.

``JobConnection`` holds no socket. An asyncio transport (or a test joining two connections
in memory) calls only three things::

    conn.receive_data(chunk)            # whatever the socket gave
    while (msg := conn.next_event()) is not NEED_DATA:
        ...                             # hand msg to the job table
    writer.write(conn.send(message))    # every message this side sends

What it enforces, per connection:

- which messages each role may send on this link (``LINK_MESSAGES``);
- per stream (``(job id, edge)`` in one direction): batch numbers 0, 1, 2, ... with no gap
  and no repeat, nothing after the ``last`` batch;
- byte credits (section 3.4.2): each stream starts with ``initial_credits`` (both ends
  must use the same: the transport's hello agrees it, ``transport.agree``); a batch
  costs ``len(rows)``; ``flow_control`` grants more.
  One check (``_batch_problem``) serves both directions: a peer's batch that breaks a
  rule breaks the connection with that rule's error (``BatchOrderError``,
  ``DataAfterLastError``, ``CreditExceededError``); one of ours is refused with a
  ``JobLocalError`` saying the same, and nothing is sent.

Whose fault: a peer's bad bytes or broken rule raise a ``JobRemoteError`` and break the
connection (every later call raises ``JobLocalError``). A refused ``send`` raises a
``JobLocalError``, emits no bytes and changes nothing, so the connection goes on.

Which jobs exist, and what to do with a batch for a job not started yet or already
cancelled, is the job tables' business (``ParticipantJobs``, ``InitiatorJobs``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

from ambrosia_core.wire import NEED_DATA, NeedData

from ._state import LINK_MESSAGES, Role
from .codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode
from .errors import (
    BatchOrderError,
    CreditExceededError,
    DataAfterLastError,
    JobLocalError,
    JobMessageDirectionError,
    JobRemoteError,
)
from .messages import MAX_U64, TYPE_OF, Batch, FlowControl, JobId, JobMessage

__all__ = ["DEFAULT_BATCH_BYTES", "DEFAULT_INITIAL_CREDITS", "ConnectionState", "JobConnection",
           "StreamKey"]

# A stream's starting credit and a batch's size, as offered in a link's hello (the smaller
# offer wins, ``transport.agree``): the smallest pair that streams results as fast as a
# larger one (bench/README.md, "bench_job_link"), so a receiver buffers at most 1 MiB
# per stream.
DEFAULT_INITIAL_CREDITS = 1024 * 1024
DEFAULT_BATCH_BYTES = 64 * 1024
DEFAULT_MAX_RELEASED = 4096


class ConnectionState(enum.Enum):
    OPEN = "open"
    ERROR = "broken by a protocol error"


@attrs.define
class _Stream:
    """One direction of one stream: the next batch number, the credit left, whether closed."""

    next_number: int
    credit: int
    closed: bool = False


StreamKey = tuple[JobId, int]


def _where(batch: Batch) -> str:
    return f"stream {batch.job_id} edge {batch.edge}"


def _batch_problem(stream: _Stream | None, batch: Batch, initial_credits: int
                   ) -> tuple[str, str] | None:
    """The one check of a batch against its stream's rules, the same in both directions:
    None, or the rule it breaks ("after last", "order", "credit") and one line saying how.
    Received, it is the peer's fault (``_PEER_BROKE``); sent, ours (``JobLocalError``)."""
    where = _where(batch)
    if stream is not None and stream.closed:
        return "after last", f"batch {batch.number} on {where} after its last batch"
    expected = 0 if stream is None else stream.next_number
    if batch.number != expected:
        what = "repeats an earlier batch" if batch.number < expected else "skips ahead"
        return "order", f"batch {batch.number} on {where} {what}: batch {expected} was expected"
    credit = initial_credits if stream is None else stream.credit
    if len(batch.rows) > credit:
        return "credit", (f"batch {batch.number} on {where} carries {len(batch.rows)} bytes; "
                          f"only {credit} were granted")
    return None


#: The error a peer's batch raises for each rule it breaks.
_PEER_BROKE: dict[str, type[JobRemoteError]] = {
    "after last": DataAfterLastError, "order": BatchOrderError, "credit": CreditExceededError,
}


class JobConnection:
    """This member's end of one connection.

    Args:
        role: this side's role.
        peer_role: the other side's role (two participants may exchange stream data).
        initial_credits: the byte credit every stream starts with, in both directions.
        max_frame_size: the largest frame accepted from the peer.
        max_released: how many released jobs are remembered, so that their late batches
            pass without stream checks (the oldest are forgotten first).
    """

    def __init__(
        self,
        role: Role,
        peer_role: Role,
        *,
        initial_credits: int = DEFAULT_INITIAL_CREDITS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_released: int = DEFAULT_MAX_RELEASED,
    ) -> None:
        if (role, peer_role) not in LINK_MESSAGES:
            raise ValueError(f"no job protocol link between {role.name} and {peer_role.name}")
        if not 0 <= initial_credits <= MAX_U64:
            raise ValueError(f"initial_credits {initial_credits} is out of range (0..2**64-1)")
        self.role = role
        self.peer_role = peer_role
        self.initial_credits = initial_credits
        self._may_send = LINK_MESSAGES[(role, peer_role)]
        self._may_receive = LINK_MESSAGES[(peer_role, role)]
        self._decoder = FrameDecoder(max_frame_size)
        self._state = ConnectionState.OPEN
        self._inbound: dict[StreamKey, _Stream] = {}
        self._outbound: dict[StreamKey, _Stream] = {}
        self._streams_of: dict[JobId, set[StreamKey]] = {}
        self._released: dict[JobId, None] = {}  # insertion-ordered set
        self._max_released = max_released

    # ------------------------------------------------------------ state
    @property
    def state(self) -> ConnectionState:
        return self._state

    def send_credit(self, job_id: JobId, edge: int) -> int:
        """Bytes this side may still send on the stream."""
        stream = self._outbound.get((job_id, edge))
        return self.initial_credits if stream is None else stream.credit

    def receive_credit(self, job_id: JobId, edge: int) -> int:
        """Bytes the peer may still send on the stream, as granted so far."""
        stream = self._inbound.get((job_id, edge))
        return self.initial_credits if stream is None else stream.credit

    def release_job(self, job_id: JobId) -> None:
        """Forget the job's streams (it is over); its late batches pass unchecked from now.

        The job tables discard such batches. The memory of released jobs is bounded by
        ``max_released``.
        """
        for key in self._streams_of.pop(job_id, ()):
            self._inbound.pop(key, None)
            self._outbound.pop(key, None)
        self._released[job_id] = None
        while len(self._released) > self._max_released:
            del self._released[next(iter(self._released))]

    def _check_open(self) -> None:
        if self._state is ConnectionState.ERROR:
            raise JobLocalError("the job connection is broken by an earlier protocol error")

    def _stream(self, table: dict[StreamKey, _Stream], key: StreamKey) -> _Stream:
        stream = table.get(key)
        if stream is None:
            stream = table[key] = _Stream(0, self.initial_credits)
            self._streams_of.setdefault(key[0], set()).add(key)
        return stream

    @property
    def partial_frame(self) -> bool:
        """Whether bytes of a frame not yet complete are buffered (after ``next_event``
        returned ``NEED_DATA``)."""
        return self._decoder.buffered > 0

    # ------------------------------------------------------------ receiving
    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes from the peer (any split)."""
        self._check_open()
        try:
            self._decoder.receive_data(data)
        except JobRemoteError:
            self._state = ConnectionState.ERROR
            raise

    def next_event(self) -> JobMessage | NeedData:
        """The next message from the peer, or ``NEED_DATA``.

        Raises:
            JobRemoteError: bad bytes or a broken rule; the connection is broken.
        """
        self._check_open()
        try:
            msg = self._decoder.next_message()
            if msg is NEED_DATA:
                return msg
            assert not isinstance(msg, NeedData)
            try:
                self._accept(msg)
            except JobRemoteError as err:
                where = self._decoder.frame_offset
                kind = int(TYPE_OF[type(msg)])
                raise type(err)(err.reason, offset=where, message_type=kind) from None
        except JobRemoteError:
            self._state = ConnectionState.ERROR
            raise
        return msg

    def events(self) -> Iterator[JobMessage]:
        """Every message the buffered bytes make now."""
        while True:
            msg = self.next_event()
            if isinstance(msg, NeedData):
                return
            yield msg

    def _accept(self, msg: JobMessage) -> None:
        kind = TYPE_OF[type(msg)]
        if kind not in self._may_receive:
            raise JobMessageDirectionError(
                f"{kind.name.lower()} may not travel from {self.peer_role.name.lower()} "
                f"to {self.role.name.lower()}",
                message_type=kind,
            )
        if type(msg) is Batch:
            self._accept_batch(msg)
        elif type(msg) is FlowControl:
            self._accept_credit(msg)

    def _accept_batch(self, batch: Batch) -> None:
        if batch.job_id in self._released:
            return
        key = (batch.job_id, batch.edge)
        problem = _batch_problem(self._inbound.get(key), batch, self.initial_credits)
        if problem is not None:
            rule, text = problem
            raise _PEER_BROKE[rule](text)
        self._take(self._inbound, key, batch)

    def _accept_credit(self, grant: FlowControl) -> None:
        if grant.job_id in self._released:
            return
        stream = self._stream(self._outbound, (grant.job_id, grant.edge))
        if stream.closed:
            return  # granted before the receiver saw our last batch
        # Credits add up without a cap: a grant is at most 2**64-1 and Python's ints
        # do not wrap, so no number of grants can make the count lie.
        stream.credit += grant.credits

    # ------------------------------------------------------------ sending
    def send(self, msg: JobMessage) -> bytes:
        """The bytes for ``msg``, after checking this side may send it now.

        Raises:
            JobLocalError: this role may not send it on this link, the connection is
                broken, or a batch breaks its stream's rules (out of order, after the
                last, past the credit: wait for flow control) or names a released job.
        """
        self._check_open()
        kind = TYPE_OF.get(type(msg))
        if kind is None:
            raise TypeError(f"not a job protocol message: {type(msg).__name__}")
        if kind not in self._may_send:
            raise JobLocalError(
                f"a {self.role.name.lower()} may not send {kind.name.lower()} to a "
                f"{self.peer_role.name.lower()}"
            )
        data = encode(msg)
        if type(msg) is Batch:
            self._commit_batch(msg)
        elif type(msg) is FlowControl:
            self._commit_grant(msg)
        return data

    def _commit_batch(self, batch: Batch) -> None:
        key = (batch.job_id, batch.edge)
        if batch.job_id in self._released:
            raise JobLocalError(f"batch on {_where(batch)}: the job was released")
        problem = _batch_problem(self._outbound.get(key), batch, self.initial_credits)
        if problem is not None:
            rule, text = problem
            raise JobLocalError(text + (": wait for flow control" if rule == "credit" else ""))
        self._take(self._outbound, key, batch)

    def _take(self, table: dict[StreamKey, _Stream], key: StreamKey, batch: Batch) -> None:
        """A batch that passed its stream's rules, counted (either direction)."""
        stream = self._stream(table, key)
        stream.credit -= len(batch.rows)
        stream.next_number += 1
        stream.closed = batch.last

    def _commit_grant(self, grant: FlowControl) -> None:
        if grant.job_id in self._released:
            return
        stream = self._stream(self._inbound, (grant.job_id, grant.edge))
        if stream.closed:
            return
        # Credits add up without a cap: a grant is at most 2**64-1 and Python's ints
        # do not wrap, so no number of grants can make the count lie.
        stream.credit += grant.credits

