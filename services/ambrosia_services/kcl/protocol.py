"""The KCL multi-lang protocol, daemon side, without I/O.

A ``ChildSession`` is one conversation with one record processor (a child process):
``send_*`` methods return the line to write to its stdin, ``receive_line`` takes one line
of its stdout and returns what happened. Sockets, pipes and timers live in ``driver``.

Both versions send the same ``initialize`` (with the checkpointed sequence number),
``processRecords`` (with ``millisBehindLatest``) and records (``"action": "record"``, a
sub-sequence number and an arrival time); they differ in the end, chosen per processor:

- ``CURRENT`` (the KCL 2.x and later daemons, amazon-kclpy 2.x and 3.x): ``leaseLost``,
  ``shardEnded`` or ``shutdownRequested``.
- ``SHUTDOWN`` (the KCL 1.x daemon, amazon-kclpy 1.x): ``shutdown`` with reason
  ``TERMINATE`` (the shard ended) or ``ZOMBIE`` (the lease is gone, or a stop: kclpy
  before 1.4 has no ``shutdownRequested`` and exits at an action it does not know).

Every field stays in the older version too: amazon-kclpy 1.4 to 1.5.1 need each one (a
missing ``sequenceNumber`` in ``initialize`` is a ``KeyError``), while older ones read
only the fields they use, as did the protocol's first document.

A child's checkpoint request names ``sequenceNumber`` / ``subSequenceNumber`` (amazon-kclpy
1.4 and later) or ``checkpoint`` (before 1.4, and the first document); either is accepted
under either version and answered in the form it was asked in (kclpy 1.5.1 reads an
answer's ``sequenceNumber`` and ``subSequenceNumber`` and fails without them). The
session checks what it can know alone (a sequence
number beyond what was delivered, a checkpoint outside an action that allows one); a
request that passes is handed to the caller (``CheckpointAsk``), which records it
durably and gives the verdict back with ``answer``.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["ILLEGAL_ARGUMENT", "INVALID_STATE", "SHUTDOWN", "CheckpointAsk", "ChildSession",
           "Protocol", "KclRecord", "Reply", "Skipped", "StatusDone", "Violation"]

# The exception names the daemon puts in a refused checkpoint's "error" (what KCL's
# checkpointer would have thrown; amazon-kclpy's sample tests for these names).
ILLEGAL_ARGUMENT = "IllegalArgumentException"  # out of range, or not a sequence number
INVALID_STATE = "InvalidStateException"  # not while an action that allows one runs
SHUTDOWN = "ShutdownException"  # the lease is gone, or the instance is stopping

NO_CHECKPOINT = -1  # a stream with nothing checkpointed yet


class Protocol(enum.Enum):
    """Which version of the protocol a processor speaks."""

    CURRENT = "current"  # leaseLost, shardEnded, shutdownRequested
    SHUTDOWN = "shutdown"  # shutdown TERMINATE or ZOMBIE


@attrs.frozen
class KclRecord:
    """One record: a message applied to the stream. ``sequence`` is its message id."""

    sequence: int
    key: bytes
    data: bytes
    arrival_ms: int


# ------------------------------------------------------------------ what happened
@attrs.frozen
class StatusDone:
    """The child finished ``action``."""

    action: str


@attrs.frozen
class CheckpointAsk:
    """A checkpoint request the session found in range: record ``sequence`` (the last
    record processed; ``NO_CHECKPOINT`` when nothing was delivered), then ``answer``.
    ``at_end``: asked while the shard-ended action runs (the stream is done)."""

    sequence: int
    at_end: bool


@attrs.frozen
class Reply:
    """A line to write back at once (a checkpoint refused by the session itself);
    ``reason`` says why, for the log."""

    line: bytes
    reason: str


@attrs.frozen
class Skipped:
    """A line that is no message of the protocol (blank lines give no event)."""

    reason: str


@attrs.frozen
class Violation:
    """The child broke the protocol in a way the conversation cannot go on from."""

    reason: str


Event = StatusDone | CheckpointAsk | Reply | Skipped | Violation


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _sequence(value: Any) -> int | None:
    """A sequence number as a child may send it (decimal string or int), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


class ChildSession:
    """The daemon's side of one conversation with one child.

    Args:
        protocol: the version the child speaks.
        shard_id: the name the child is told (the stream's name).
        checkpoint: the stream's recorded checkpoint (``NO_CHECKPOINT``: none); records
            after it are what the child will be sent.
    """

    def __init__(self, protocol: Protocol, shard_id: str, checkpoint: int) -> None:
        self.protocol = protocol
        self.shard_id = shard_id
        self.delivered = checkpoint  # the highest sequence number sent (or checkpointed)
        self.awaiting = ""  # the action whose status is due ("" = none)
        self.asking = False  # a checkpoint request waits for ``answer``
        self.gone = False
        self.stopping = False  # the log takes no more inputs: no checkpoint can be recorded
        self._ask_echo: Any = None
        self._ask_sub: Any = None
        self._ask_key = "sequenceNumber"  # the form the waiting request was asked in

    # ------------------------------------------------------------ daemon -> child
    def initialize(self) -> bytes:
        seq = None if self.delivered == NO_CHECKPOINT else str(self.delivered)
        return self._send("initialize", {"action": "initialize", "shardId": self.shard_id,
                                         "sequenceNumber": seq,
                                         "subSequenceNumber": None if seq is None else 0})

    def process_records(self, records: Sequence[KclRecord], millis_behind: int = 0) -> bytes:
        if not records:
            raise ValueError("processRecords needs at least one record")
        out = [{"action": "record", "data": base64.b64encode(r.data).decode(),
                "partitionKey": r.key.decode("utf-8", "replace"),
                "sequenceNumber": str(r.sequence), "subSequenceNumber": 0,
                "approximateArrivalTimestamp": r.arrival_ms} for r in records]
        line = self._send("processRecords", {"action": "processRecords", "records": out,
                                             "millisBehindLatest": millis_behind})
        self.delivered = max(self.delivered, records[-1].sequence)
        return line

    def shard_ended(self) -> bytes:
        """The stream ended and every record was sent: the child should checkpoint."""
        if self.protocol is Protocol.CURRENT:
            return self._send("shardEnded", {"action": "shardEnded"})
        return self._send("shutdown", {"action": "shutdown", "reason": "TERMINATE"})

    def lease_lost(self) -> bytes:
        """This daemon no longer holds the stream: no checkpoint is accepted from now on."""
        self.gone = True
        if self.protocol is Protocol.CURRENT:
            return self._send("leaseLost", {"action": "leaseLost"})
        return self._send("shutdown", {"action": "shutdown", "reason": "ZOMBIE"})

    def shutdown_requested(self) -> bytes:
        """The instance is stopping on purpose: the child may checkpoint (refused with
        ``ShutdownException`` once ``stopping`` says the log takes no more inputs). Under
        the older version it is told ``ZOMBIE`` (do not checkpoint), which every
        amazon-kclpy 1.x knows (shutdownRequested came with 1.4)."""
        if self.protocol is Protocol.CURRENT:
            return self._send("shutdownRequested", {"action": "shutdownRequested"})
        return self.lease_lost()

    def answer(self, error: str = "") -> bytes:
        """The verdict on the ``CheckpointAsk`` just returned ("" = recorded)."""
        if not self.asking:
            raise RuntimeError("no checkpoint request waits for an answer")
        self.asking = False
        return self._checkpoint_line(self._ask_key, self._ask_echo, self._ask_sub, error)

    def _send(self, action: str, msg: dict[str, Any]) -> bytes:
        if self.awaiting:
            raise RuntimeError(f"cannot send {action}: the status of {self.awaiting} is due")
        self.awaiting = action
        return _line(msg)

    @staticmethod
    def _checkpoint_line(key: str, seq: Any, sub: Any, error: str) -> bytes:
        """The answer to a checkpoint request asked with ``key``, in its form."""
        if key == "checkpoint":
            msg: dict[str, Any] = {"action": "checkpoint", "checkpoint": seq}
        else:
            msg = {"action": "checkpoint", "sequenceNumber": seq, "subSequenceNumber": sub}
        if error:
            msg["error"] = error
        return _line(msg)

    # ------------------------------------------------------------ child -> daemon
    def receive_line(self, raw: bytes) -> Event | None:
        """One line of the child's stdout; None for a blank line."""
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return None
        try:
            msg = json.loads(text)
        except ValueError:
            return Skipped(f"not JSON: {text[:200]!r}")
        if not isinstance(msg, dict):
            return Skipped(f"not a JSON object: {text[:200]!r}")
        action = msg.get("action")
        if action == "status":
            return self._on_status(msg)
        if action == "checkpoint":
            return self._on_checkpoint(msg)
        return Skipped(f"unknown action {action!r}: {text[:200]!r}")

    def _on_status(self, msg: dict[str, Any]) -> Event:
        done = msg.get("responseFor")
        if not isinstance(done, str):
            return Skipped(f"a status without responseFor: {msg!r}")
        if self.asking:
            return Violation(f"a status for {done} while its checkpoint waits for an answer")
        if done != self.awaiting:
            waiting = self.awaiting or "nothing"
            return Violation(f"a status for {done} while waiting for {waiting}")
        self.awaiting = ""
        return StatusDone(done)

    def _on_checkpoint(self, msg: dict[str, Any]) -> Event:
        if self.asking:
            return Violation("a second checkpoint request before the first was answered")
        key = "sequenceNumber" if "sequenceNumber" in msg else "checkpoint"
        raw, sub = msg.get(key), msg.get("subSequenceNumber")
        refuse = ""
        if self.gone or self.stopping:
            refuse = SHUTDOWN
        elif self.awaiting not in ("processRecords", "shardEnded", "shutdown",
                                   "shutdownRequested"):
            refuse = INVALID_STATE
        seq = self.delivered if raw is None else _sequence(raw)
        if not refuse and (seq is None or seq > self.delivered):
            refuse = ILLEGAL_ARGUMENT
        if refuse:
            why = (f"checkpoint at {raw!r} refused ({refuse}; delivered up to "
                   f"{self.delivered}, waiting for {self.awaiting or 'nothing'})")
            return Reply(self._checkpoint_line(key, raw, sub, refuse), why)
        assert seq is not None
        self.asking = True
        self._ask_key = key
        self._ask_echo = str(seq) if seq != NO_CHECKPOINT else None
        self._ask_sub = sub if raw is not None else (0 if seq != NO_CHECKPOINT else None)
        at_end = self.awaiting == "shardEnded" or (
            self.awaiting == "shutdown" and not self.gone)
        return CheckpointAsk(seq, at_end)
