"""The connector coordinator's records: the inputs its core applies (``Incoming``, a staged
run's reference) and the plain data its state is made of: a stream's point of reference,
a sink's pending output (bytes and staged references) and its transactions. No I/O, no
rules: those are ``core.ConnectorCore``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import attrs

from ambrosia_services.staging import Ref

__all__ = ["FROM_START", "KEEP_DECIDED", "Applied", "Incoming", "IncomingRef", "Pending",
           "SinkRecord", "StagedRunError", "StreamRecord"]

FROM_START = (1 << 64) - 1  # a point of reference meaning "nothing applied yet"
KEEP_DECIDED = 4  # decisions remembered per sink (a sink holds at most one unsettled)



class Incoming(NamedTuple):
    """One MESSAGE as the ``receive`` Impulse carries it (an array of these fields, in
    this order)."""

    stream_id: int
    stream: str  # the stream's name
    msg_id: int
    event_time: int
    key: bytes
    payload: bytes

#: One staged run as the ``receive_staged`` Impulse carries it: [stream name, *Ref fields].
IncomingRef = list[Any]


class StagedRunError(RuntimeError):
    """A staged run begins at or below its stream's point of reference and ends above
    it. The source listener never stages such a run (it drops what it already staged),
    so this is a broken invariant, not bad input."""


@attrs.frozen
class Applied:
    """A message that was applied (not a re-send): what the output hook sees."""

    stream_id: int
    message_id: int
    event_time: int
    key: bytes
    payload: bytes


@attrs.define
class StreamRecord:
    """One source stream: its point of reference is the last message id applied."""

    name: str
    por: int = FROM_START
    applied: int = 0
    dropped: int = 0
    closed: bool = False
    lines: int = 0  # of the applied messages (see ``ambrosia_services.staging.count_lines``)


class Pending:
    """A sink's output not yet committed, in order: inline bytes (what handlers emitted)
    and staged blocks (whose payloads are sent as they are, read from their segments by
    the sink's link, never held in the state). ``bytes()`` of output with no blocks is
    its bytes."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: Iterable[bytes | Ref] = ()) -> None:
        self.pieces: list[bytearray | Ref] = []
        self.size = 0
        for piece in pieces:
            if isinstance(piece, Ref):
                self.add_ref(piece)
            else:
                self += piece

    def __len__(self) -> int:
        return self.size

    def __iadd__(self, data: bytes) -> Pending:
        if data:
            if self.pieces and isinstance(self.pieces[-1], bytearray):
                self.pieces[-1] += data
            else:
                self.pieces.append(bytearray(data))
            self.size += len(data)
        return self

    def add_ref(self, ref: Ref) -> None:
        self.pieces.append(ref)
        self.size += ref.size

    def __bytes__(self) -> bytes:
        if any(isinstance(p, Ref) for p in self.pieces):
            raise TypeError("the pending output holds staged blocks: see parts()")
        return b"".join(self.pieces)  # type: ignore[arg-type]

    def parts(self, n: int) -> list[bytes | Ref]:
        """The pieces of the first ``n`` bytes (``n`` ends a piece or falls in a bytes
        piece, which is cut)."""
        out: list[bytes | Ref] = []
        for piece in self.pieces:
            if n <= 0:
                break
            if isinstance(piece, Ref):
                out.append(piece)
                n -= piece.size
            else:
                out.append(bytes(piece[:n]))
                n -= len(out[-1])  # type: ignore[arg-type]
        return out

    def drop(self, n: int) -> list[Ref]:
        """Remove the first ``n`` bytes (a staged block only whole); returns the blocks
        removed."""
        dropped: list[Ref] = []
        while n > 0 and self.pieces:
            piece = self.pieces[0]
            if isinstance(piece, Ref):
                if piece.size > n:
                    raise ValueError("a staged block cannot be committed in part")
                dropped.append(piece)
                del self.pieces[0]
                n -= piece.size
                self.size -= piece.size
            else:
                k = min(n, len(piece))
                del piece[:k]
                if not piece:
                    del self.pieces[0]
                n -= k
                self.size -= k
        return dropped

    def to_state(self) -> list[Any]:
        return [["b", bytes(p)] if isinstance(p, bytearray) else ["r", p.to_list()]
                for p in self.pieces]

    @classmethod
    def from_state(cls, state: Any) -> Pending:
        if isinstance(state, (bytes, bytearray)):  # written before staged blocks
            return cls([bytes(state)])
        return cls(Ref.from_list(v) if kind == "r" else bytes(v) for kind, v in state)


@attrs.define
class SinkRecord:
    """One sink: bytes from ``committed`` on are ``pending``; a transaction in flight
    covers ``[committed, txn_end)`` of them."""

    committed: int = 0
    pending: Pending = attrs.field(factory=Pending)
    txn_id: str = ""
    txn_end: int = 0
    txn_count: int = 0  # transactions cut so far: the next id's number
    uncut_since: int | None = None  # logged time (ns) the oldest uncut byte was emitted
    decided: dict[str, bool] = attrs.field(factory=dict)  # txn -> commit, newest last
    settled_rtag: int = 0  # the rtag of the last ListUncommitted settled
    settlement: list[tuple[str, bool]] = attrs.field(factory=list)  # its Phase2s
    commits: int = 0
    aborts: int = 0
    active: bool = True  # in the configured sinks (output goes only to active ones)

    @property
    def uncut(self) -> int:
        """Pending bytes not in the transaction in flight."""
        return len(self.pending) - (self.txn_end - self.committed if self.txn_id else 0)

    def txn_parts(self) -> list[bytes | Ref]:
        """What the transaction in flight sends: bytes and staged blocks, in order."""
        return self.pending.parts(self.txn_end - self.committed) if self.txn_id else []

    def to_state(self) -> list[Any]:
        """The fields as plain data, in declaration order (new fields go at the end)."""
        return [self.committed, self.pending.to_state(), self.txn_id, self.txn_end,
                self.txn_count, self.uncut_since, [list(d) for d in self.decided.items()],
                self.settled_rtag, [list(s) for s in self.settlement], self.commits,
                self.aborts, self.active]

    @classmethod
    def from_state(cls, fields: Sequence[Any]) -> SinkRecord:
        (committed, pending, txn_id, txn_end, txn_count, uncut_since, decided, settled_rtag,
         settlement, commits, aborts, active) = fields
        return cls(committed=committed, pending=Pending.from_state(pending), txn_id=txn_id,
                   txn_end=txn_end, txn_count=txn_count, uncut_since=uncut_since,
                   decided={txn: commit for txn, commit in decided},
                   settled_rtag=settled_rtag,
                   settlement=[(txn, commit) for txn, commit in settlement],
                   commits=commits, aborts=aborts, active=active)
