"""The group-commit rule, without I/O: which inputs the next log record holds, what it
says, and what may go out once it is durable.

Inputs (self-calls, Impulses, calls from links) wait in ``pending``. ``take`` packs what
waits (up to a size) into the next record: its sequence number, its disk and wire bytes,
and the input positions it makes durable. Nothing of a record may reach the binding or a
sender before the record is durable: ``durable`` is the only way to the ``Durable``
that names what to deliver and which positions to acknowledge, and it moves the log's
position (``next_seq``, ``inputs``) only then. The shell (``commit``) writes and syncs
between the two; a record taken and never made durable (a failed write) leaves the
position where it was.
"""

from __future__ import annotations

import collections

import attrs

from ..logstore import encode_disk_record
from .core_actions import Durable

__all__ = ["Durable", "GroupCommit", "PendingInput", "TakenRecord"]

# An input queued for the next log record: (input key, link sequence number, message
# bytes); key is the sender's instance name (our own for self-calls) or None for inputs
# that carry no number (Impulses).
PendingInput = tuple[str | None, int | None, bytes]


@attrs.frozen
class TakenRecord:
    """A log record taken from what waits (``GroupCommit.take``), to be written and
    synced before ``GroupCommit.durable`` lets anything of it go."""

    seq_id: int
    disk: bytes  # as the log holds it (with the input positions and the epoch)
    wire: bytes  # as the binding receives it
    inputs: dict[str, int]  # every sender's position once this record is durable
    senders: frozenset[str]  # the senders whose calls it holds
    count: int = 0  # the inputs it holds


class GroupCommit:
    """The log's position and the inputs waiting for the next record.

    Args:
        cid: the committer id stamped into every record.
    """

    def __init__(self, cid: int) -> None:
        self.cid = cid
        self.pending: collections.deque[PendingInput] = collections.deque()
        self.next_seq = 0  # of the next record
        self.inputs: dict[str, int] = {}  # per sender, the last call the log holds

    def take(self, max_bytes: int, epoch: int | None = None) -> TakenRecord:
        """The next record: what waits, in order, until ``max_bytes`` are taken (at
        least one input when any waits). The position does not move (see ``durable``)."""
        batch: list[bytes] = []
        size = 0
        inputs = dict(self.inputs)
        senders: set[str] = set()
        pending = self.pending
        while pending and size < max_bytes:
            key, seq, body = pending.popleft()
            batch.append(body)
            size += len(body)
            if key is not None and seq is not None:
                inputs[key] = max(inputs.get(key, 0), seq)
                senders.add(key)
        disk, wire = encode_disk_record(self.cid, self.next_seq, b"".join(batch), inputs,
                                        epoch)
        return TakenRecord(self.next_seq, disk, wire, inputs, frozenset(senders), len(batch))

    def durable(self, record: TakenRecord, own_name: str) -> Durable:
        """``record`` is durable: the log's position moves past it, and its bytes may be
        delivered and its senders' calls acknowledged.

        Raises:
            ValueError: ``record`` is not the next one (taken twice, or out of order).
        """
        if record.seq_id != self.next_seq:
            raise ValueError(f"record {record.seq_id} made durable while the next is "
                             f"{self.next_seq}")
        self.next_seq = record.seq_id + 1
        self.inputs = record.inputs
        return Durable(record.wire, {s: record.inputs[s] for s in sorted(record.senders)
                                     if s != own_name})
