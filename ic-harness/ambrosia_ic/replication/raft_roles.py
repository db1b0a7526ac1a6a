"""The roles of a replica whose log is in a Raft cluster, as steps with no I/O: what
``raft.RaftReplica`` runs over the cluster and its coordinator, and what the simulator's
replicas (``tests/sim/raftstore``) run over a simulated cluster, one step at a time, with
anything else (the old primary's entries landing, crashes, pauses) free to come between
two.

A replica

1. looks at the log (``Look``); if nobody ever claimed the instance and its own claim is
   the first, it makes the first start and goes live;
2. otherwise follows as a standby: a replica that follows nothing yet keeps what it read
   until the cluster holds a checkpoint and a record, loads the newest checkpoint, and
   delivers what it kept from there on (a checkpoint with no record after it is a first
   start's that died before its record 0 counted: the replica whose claim wins next makes
   the first start again, which a binding that loaded a checkpoint cannot); records go
   to its binding in sequence-id order, and one that skips a sequence id is damage (the
   cluster's log has one order, so a gap is never a record still to come);
3. claims the next epoch when ``raft_rules.standby_claim`` says so; a claim that wins
   takes over: it delivers what the log holds up to its claim (its own claim's read
   brought it), opens the next log (fenced: refused once a newer epoch was claimed),
   becomes the primary and goes live from the sequence id after the last record it
   delivered; a claim won over a log with no record yet makes the first start, which is
   still owed;
4. takes a checkpoint when it is the checkpointing secondary's turn (``turn``), numbered
   by the sequence id its state starts at, and writes it to the cluster.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import attrs

from ambrosia_core.wire import HEADER_SIZE, check_bytes
from ambrosia_core.wire.records import HEADER
from ambrosia_ic.errors import LogCorruptionError

from ..logstore import DiskRecord
from ..logstore.raft_entries import CheckpointEnd
from ..logstore.raft_rules import standby_claim, standby_wait
from ..logstore.watermarks import checked, decode_watermarks

__all__ = ["Checkpoint", "Claim", "Deliver", "FirstStart", "GoLive", "LoadCheckpoint",
           "Look", "Looked", "OpenLog", "RaftRoles", "RoleStep", "Standby", "TakingOver",
           "Wait", "decode_record", "rank", "turn"]

POLL = 0.05  # the longest a follower waits for the leader's broadcast before reading


def decode_record(data: bytes, index: int) -> DiskRecord:
    """One data record as the committer wrote it (disk form: negative length, then the
    watermarks), checked.

    Raises:
        LogCorruptionError: it does not parse, or its check bytes do not match.
    """
    if len(data) < HEADER_SIZE:
        raise LogCorruptionError("raft log", index, "a record shorter than its header")
    committer, stored, check, seq = HEADER.unpack_from(data, 0)
    length = -stored - 1
    if stored >= 0 or length < HEADER_SIZE or length > len(data):
        raise LogCorruptionError("raft log", index, f"length field {stored} is not a record's")
    body = data[HEADER_SIZE:length]
    if check_bytes(body) != check:
        raise LogCorruptionError("raft log", index, f"record {seq}: check bytes do not match")
    try:
        inputs, end, epoch = decode_watermarks(data, length, len(data))
    except Exception as err:  # Incomplete or WireFormatError: either way damaged
        raise LogCorruptionError("raft log", index, f"record {seq}: watermarks: {err}") from None
    if end != len(data):
        raise LogCorruptionError("raft log", index, f"record {seq}: bytes after its watermarks")
    if not checked(data, 0, length, end):
        raise LogCorruptionError("raft log", index, f"record {seq}: check bytes do not match "
                                 "its header and watermarks")
    wire = HEADER.pack(committer, length, check, seq) + body
    return DiskRecord(seq, 0, end, wire, inputs, epoch)


@attrs.frozen
class Looked:
    """What a look at the log found: the newest epoch and its holder's replica number
    (None: nobody holds it), the records that count so far, the newest complete
    checkpoint, the records read since the last look (decoded, in log order), how long
    the epoch's holder was silent, and whether its process is known to have ended."""

    epoch: int
    primary: int | None
    record_count: int
    newest: CheckpointEnd | None
    records: tuple[DiskRecord, ...]
    silent: float
    ended: bool = False


@attrs.frozen
class Look:
    """Read the log as far as the cluster has committed; answer ``Looked``."""


@attrs.frozen
class Claim:
    """Claim the next epoch (``RaftTenure.claim``'s ``after`` and ``if_silent``); answer
    whether this replica now holds it."""

    after: int
    if_silent: bool


@attrs.frozen
class FirstStart:
    """This replica holds the instance's first epoch: make the first start, go live."""


@attrs.frozen
class Standby:
    """This replica follows the log as a standby."""


@attrs.frozen
class LoadCheckpoint:
    """Start from checkpoint ``end`` of the cluster (its check bytes verified); answer
    the sequence id its state starts at."""

    end: CheckpointEnd


@attrs.frozen
class Deliver:
    """Deliver ``records`` (in sequence-id order, none skipped) to the binding."""

    records: tuple[DiskRecord, ...]


@attrs.frozen
class Checkpoint:
    """Take a checkpoint of the binding at sequence id ``n`` and write it to the cluster
    as checkpoint ``n``."""

    n: int


@attrs.frozen
class Wait:
    """Wait for news from the cluster, at most ``seconds``."""

    seconds: float


@attrs.frozen
class TakingOver:
    """The claim won over a log with records: this replica is the primary now, and says
    why it took over (``gone``)."""

    gone: str


@attrs.frozen
class OpenLog:
    """Open the next log to write (the fenced sink's ``next_log``: refused once a newer
    epoch was claimed)."""


@attrs.frozen
class GoLive:
    """Become the primary and go live."""


RoleStep = (Look | Claim | FirstStart | Standby | LoadCheckpoint | Deliver | Checkpoint
            | Wait | TakingOver | OpenLog | GoLive)
Steps = Generator[RoleStep, Any, None]


def rank(number: int, primary: int | None) -> int:
    """0 for the checkpointing secondary (the lowest-numbered replica that is not the
    primary); a higher rank checkpoints only when those below it have not, after
    ``checkpoint_every`` more records each (they may be down)."""
    return sum(1 for k in range(number) if k != primary)


def turn(number: int, primary: int | None, next_seq: int, loaded: int | None,
         every: int) -> bool:
    """Whether replica ``number``, which follows the log at ``next_seq`` from a
    checkpoint at ``loaded`` (None: none yet), takes a checkpoint now."""
    return loaded is not None and next_seq - loaded >= every * (1 + rank(number, primary))


def gone(looked: Looked, lease: float) -> str:
    """Why a standby's claim came, for the takeover's line."""
    if looked.silent == float("inf"):
        return "the primary resigned"
    if looked.ended:
        return "the primary's process ended (its watch closed)"
    return f"the primary was silent {looked.silent:.3f} s (lease {lease:g} s)"


class RaftRoles:
    """Replica ``number``'s decisions: ``run`` is the generator of its steps from start
    to going live; ``next_seq`` is where its log stands (the sequence id of the next
    record it delivers), once it loaded a checkpoint.

    Args:
        lease: the seconds of silence after which a standby may claim.
        every: records between the checkpoints the checkpointing secondary takes.
    """

    def __init__(self, number: int, lease: float, every: int) -> None:
        self.number = number
        self.lease = lease
        self.every = every
        self.loaded: int | None = None  # the checkpoint this replica last started from or took
        self.next_seq: int | None = None
        self.backlog: list[DiskRecord] = []  # records read before a checkpoint was loaded

    def run(self) -> Steps:
        """The replica's start: the first start, or following until its claim wins and
        it takes over."""
        looked = yield Look()
        if looked.epoch == 0 and (yield Claim(0, False)):
            yield FirstStart()
            return
        yield Standby()
        while True:
            yield from self.follow(looked)
            move = standby_claim(looked.epoch, looked.silent, self.lease, ended=looked.ended)
            if move is not None and (yield Claim(*move)):
                yield from self.take_over(looked)
                return
            if self.next_seq is not None and turn(self.number, looked.primary, self.next_seq,
                                                  self.loaded, self.every):
                yield from self.checkpoint()
            # A dead primary sends no broadcasts: wake up when its lease runs out, not up
            # to a poll interval later.
            yield Wait(standby_wait(looked.silent, self.lease, POLL))
            looked = yield Look()

    def follow(self, looked: Looked) -> Steps:
        """Deliver what ``looked`` read: kept until a checkpoint is loaded, then from the
        sequence id it starts at, in order.

        Raises:
            LogCorruptionError: a record skips a sequence id.
        """
        recs: Sequence[DiskRecord] = looked.records
        if self.next_seq is None:
            self.backlog += recs
            if looked.newest is None or looked.record_count == 0:
                return  # none yet, or a first start's that may still be made again
            self.next_seq = self.loaded = yield LoadCheckpoint(looked.newest)
            recs, self.backlog = self.backlog, []
        assert self.next_seq is not None
        due = self.next_seq
        out = []
        for r in recs:
            if r.seq_id < due:
                continue  # before the checkpoint it loaded, or read twice
            if r.seq_id != due:
                raise LogCorruptionError("raft log", 0, f"record {r.seq_id} where {due} was due")
            out.append(r)
            due += 1
        if out:
            yield Deliver(tuple(out))
            self.next_seq = due

    def take_over(self, looked: Looked) -> Steps:
        """The claim won: read up to it, open the next log, go live (or make the first
        start, if the log holds no record yet)."""
        claimed = yield Look()  # what the claim's own read brought: the log up to it
        if claimed.record_count == 0:
            yield FirstStart()  # the first start never logged its record 0: still owed
            return
        yield TakingOver(gone(looked, self.lease))
        yield from self.follow(claimed)
        yield OpenLog()
        yield GoLive()

    def checkpoint(self) -> Steps:
        """The checkpointing secondary's turn: a checkpoint numbered by the sequence id
        its state starts at."""
        assert self.next_seq is not None
        yield Checkpoint(self.next_seq)
        self.loaded = self.next_seq
