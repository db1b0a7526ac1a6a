"""What the immortal records for record processors: per stream with a processor, the
records not yet checkpointed and the last checkpoint. No I/O; every change is a function
of a logged input, so a replay rebuilds it, and it is plain data for checkpoints.

A record stays here from the handler that applied its message until a checkpoint at or
beyond its sequence number is recorded: that is what lets a processor started after any
crash begin at the last checkpoint and still see every later record.

When the coordinator stages what it receives (``staging``), a stream's records are not
here but in staged blocks (``ambrosia_services.staging``, written with each message's id and key):
the state keeps each block's reference and arrival time until a checkpoint covers its
last message, and the driver reads the records from the segments. The blocks a
checkpoint lets go are handed back (``take_dropped``) so that the immortal releases them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ambrosia_services.staging import Ref

from .protocol import ILLEGAL_ARGUMENT, NO_CHECKPOINT, KclRecord

__all__ = ["KclCore", "ProcessorRecord", "StagedRun"]


@attrs.frozen
class StagedRun:
    """A staged block of a stream's records, and when it arrived (logged time, ms)."""

    ref: Ref
    arrival_ms: int


@attrs.define
class ProcessorRecord:
    """One stream with a processor.

    Attributes:
        name: the stream's name (the shard id its processor is told).
        checkpoint: the last checkpoint recorded (``NO_CHECKPOINT``: none).
        records: the records after it, in sequence order.
        blocks: or the staged blocks that hold them (the last checkpoint may fall inside
            the first), in order.
        ended: the stream's EOS was applied and no record came after it.
        finished: a checkpoint was recorded at the end of the ended stream.
    """

    name: str
    checkpoint: int = NO_CHECKPOINT
    records: list[KclRecord] = attrs.field(factory=list)
    ended: bool = False
    finished: bool = False
    checkpoints: int = 0
    refused: int = 0
    blocks: list[StagedRun] = attrs.field(factory=list)

    @property
    def waiting(self) -> bool:
        """Whether records after the checkpoint are kept (here or staged)."""
        return bool(self.records or self.blocks)

    def blocks_after(self, sequence: int) -> list[StagedRun]:
        """The staged blocks that hold a record with a sequence number above
        ``sequence``, in order."""
        return [b for b in self.blocks if b.ref.last_id > sequence]

    def after(self, sequence: int, limit: int) -> list[KclRecord]:
        """Up to ``limit`` records with a sequence number above ``sequence``."""
        start = self.first_after(sequence)
        return self.records[start:start + limit]

    def first_after(self, sequence: int) -> int:
        lo, hi = 0, len(self.records)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.records[mid].sequence <= sequence:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @property
    def last(self) -> int:
        if self.blocks:
            return self.blocks[-1].ref.last_id
        return self.records[-1].sequence if self.records else self.checkpoint


class KclCore:
    """The processors' part of the state."""

    def __init__(self) -> None:
        self.attached: list[str] = []  # names of the streams that have a processor
        self.streams: dict[int, ProcessorRecord] = {}
        self._dropped: list[Ref] = []  # blocks let go, until ``take_dropped``

    def take_dropped(self) -> list[Ref]:
        """The staged blocks let go since the last call (a checkpoint beyond them, or
        their stream's processor removed): the immortal releases them."""
        dropped, self._dropped = self._dropped, []
        return dropped

    def configure(self, names: Iterable[str]) -> None:
        """Which streams have a processor. A stream that loses its processor keeps its
        checkpoint but no records (nothing would take them)."""
        self.attached = sorted(set(names))
        for rec in self.streams.values():
            if rec.name not in self.attached:
                rec.records.clear()
                self._dropped += [b.ref for b in rec.blocks]
                rec.blocks.clear()

    def retain(self, stream_id: int, name: str, records: Sequence[KclRecord]) -> bool:
        """Keep a run of applied records of one stream, if it has a processor."""
        if name not in self.attached or not records:
            return False
        rec = self.streams.get(stream_id)
        if rec is None:
            rec = self.streams[stream_id] = ProcessorRecord(name)
        rec.name = name
        rec.records.extend(r for r in records if r.sequence > rec.last)
        rec.ended = rec.finished = False
        return True

    def retain_staged(self, stream_id: int, name: str, refs: Sequence[Ref],
                      arrival_ms: int) -> list[Ref]:
        """Keep a run of applied staged blocks of one stream, if it has a processor.
        Returns the blocks kept: the immortal holds them until ``take_dropped`` gives
        them back."""
        if name not in self.attached or not refs:
            return []
        rec = self.streams.get(stream_id)
        if rec is None:
            rec = self.streams[stream_id] = ProcessorRecord(name)
        rec.name = name
        kept = [ref for ref in refs if ref.last_id > rec.last]
        rec.blocks += [StagedRun(ref, arrival_ms) for ref in kept]
        if kept:
            rec.ended = rec.finished = False
        return kept

    def end_of_stream(self, stream_id: int) -> bool:
        rec = self.streams.get(stream_id)
        if rec is None or rec.name not in self.attached:
            return False
        rec.ended = True
        return True

    def checkpoint(self, stream_id: int, sequence: int, at_end: bool) -> str:
        """Record a processor's checkpoint; returns "" or the refusal's exception name.

        A checkpoint below the recorded one, or above the last record kept, is refused
        (``IllegalArgumentException``), as KCL's checkpointer refuses it.
        """
        rec = self.streams.get(stream_id)
        if rec is None or sequence < rec.checkpoint or sequence > rec.last:
            if rec is not None:
                rec.refused += 1
            return ILLEGAL_ARGUMENT
        if sequence > rec.checkpoint:
            rec.checkpoint = sequence
            del rec.records[:rec.first_after(sequence)]
            done = [b for b in rec.blocks if b.ref.last_id <= sequence]
            if done:
                del rec.blocks[:len(done)]
                self._dropped += [b.ref for b in done]
        rec.checkpoints += 1
        if at_end and rec.ended and sequence == rec.last:
            rec.finished = True
        return ""

    def by_name(self, name: str) -> tuple[int, ProcessorRecord] | None:
        for sid, rec in self.streams.items():
            if rec.name == name:
                return sid, rec
        return None

    def status(self) -> dict[str, Any]:
        return {rec.name: {"stream_id": sid,
                           "checkpoint": None if rec.checkpoint == NO_CHECKPOINT
                           else rec.checkpoint,
                           "pending_records": len(rec.records),
                           "pending_blocks": len(rec.blocks), "ended": rec.ended,
                           "finished": rec.finished, "checkpoints": rec.checkpoints,
                           "refused": rec.refused, "attached": rec.name in self.attached}
                for sid, rec in sorted(self.streams.items())}

    # ------------------------------------------------------------ checkpoint
    def to_state(self) -> dict[str, Any]:
        return {"attached": list(self.attached),
                "streams": [[sid, r.name, r.checkpoint, r.ended, r.finished, r.checkpoints,
                             r.refused, [[x.sequence, x.key, x.data, x.arrival_ms]
                                         for x in r.records],
                             [[*b.ref.to_list(), b.arrival_ms] for b in r.blocks]]
                            for sid, r in self.streams.items()]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> KclCore:
        core = cls()
        core.attached = list(state["attached"])
        for sid, name, cp, ended, finished, cps, refused, records, *staged in state["streams"]:
            blocks = [StagedRun(Ref.from_list(b[:-1]), b[-1]) for b in (staged or [[]])[0]]
            core.streams[sid] = ProcessorRecord(
                name, cp, [KclRecord(s, bytes(k), bytes(d), a) for s, k, d, a in records],
                ended, finished, cps, refused, blocks)
        return core
