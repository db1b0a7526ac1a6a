"""The journal a checkpoint carries while handlers are suspended on ``await``.

A suspended coroutine cannot be serialized, so a checkpoint taken while one is suspended
stores the state from before it began (the snapshot) and every input handled since (the
journal); loading it re-runs those inputs. The journal is dropped only when no handler is
suspended, so a handler that awaits for hours makes every checkpoint grow with every input
in between. This module measures the journal, says when it passes the class's
``journal_warning_bytes`` (at that size, then at each doubling, so a journal that keeps
growing is reported a few times, not at every input), and when it passes
``journal_limit_bytes``.

Sizes count the bytes of each input's arguments plus a small fixed overhead: a function
of the log alone, so a replay reaches every threshold at the same input as the live run.

Records are typed (``InitialInput``, ``RpcInput``); inside a checkpoint each is the msgpack
list it has always been (``["i", data]``, ``["r", method_id, rpc_type, args, reserved]``)
and the checkpoint's mode is ``JournalMode``'s value ("q" or "p"), so checkpoints written
before the records were typed load unchanged.
"""

from __future__ import annotations

import enum
from typing import Any

from ambrosia_py.errors import JournalLimitError, SerializationError

__all__ = ["INPUT_OVERHEAD", "InitialInput", "LoggedInput", "Journal", "JournalMode", "RpcInput",
           "input_from_wire", "input_size"]

INPUT_OVERHEAD = 16  # bytes per input for its framing in the checkpoint (msgpack, ids)


class JournalMode(enum.Enum):
    """What a checkpoint holds, as its header's ``mode``."""

    QUIESCENT = "q"  # the state; no handler was suspended
    PENDING = "p"  # a snapshot and the inputs handled since (handlers were suspended)


class InitialInput:
    """The logged echo of the InitialMessage (the first start's input)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        return type(other) is InitialInput and other.data == self.data

    def __hash__(self) -> int:
        return hash((InitialInput, self.data))

    def __repr__(self) -> str:
        return f"InitialInput({self.data!r})"

    def to_wire(self) -> list[Any]:
        return ["i", self.data]


class RpcInput:
    """A logged incoming RPC."""

    __slots__ = ("args", "method_id", "reserved", "rpc_type")

    def __init__(self, method_id: int, rpc_type: int, args: bytes, reserved: int = 0) -> None:
        self.method_id = method_id
        self.rpc_type = rpc_type
        self.args = args
        self.reserved = reserved

    def _key(self) -> tuple[int, int, bytes, int]:
        return self.method_id, self.rpc_type, self.args, self.reserved

    def __eq__(self, other: object) -> bool:
        return type(other) is RpcInput and other._key() == self._key()

    def __hash__(self) -> int:
        return hash((RpcInput, self._key()))

    def __repr__(self) -> str:
        return (f"RpcInput(method_id={self.method_id}, rpc_type={self.rpc_type}, "
                f"{len(self.args)} bytes, reserved={self.reserved})")

    def to_wire(self) -> list[Any]:
        return ["r", self.method_id, self.rpc_type, self.args, self.reserved]


LoggedInput = InitialInput | RpcInput
"""One input from the log as the journal keeps it for a suspended call."""


def input_from_wire(obj: Any) -> LoggedInput:
    """One journal record as a checkpoint stores it, typed.

    Raises:
        SerializationError: the record is neither form (a damaged checkpoint).
    """
    try:
        if obj[0] == "i" and len(obj) == 2 and isinstance(obj[1], bytes):
            return InitialInput(obj[1])
        if obj[0] == "r" and len(obj) == 5 and isinstance(obj[3], bytes):
            return RpcInput(int(obj[1]), int(obj[2]), obj[3], int(obj[4]))
    except (TypeError, IndexError, KeyError, ValueError):
        pass
    raise SerializationError(f"the checkpoint's journal holds a record in no known form: "
                             f"{obj!r:.80}")


def input_size(record: LoggedInput) -> int:
    """The bytes one logged input adds to a checkpoint's journal."""
    return INPUT_OVERHEAD + len(record.data if type(record) is InitialInput
                                else record.args)  # type: ignore[union-attr]


class Journal:
    """The snapshot and the inputs handled since it, with their size.

    Attributes:
        snapshot: the serialized state from before the first suspended handler began, or
            None while no handler may be suspended.
        records: every input handled since the snapshot, in order.
        size: their size in bytes (``input_size``).
    """

    __slots__ = ("_warn_at", "records", "size", "snapshot")

    def __init__(self) -> None:
        self.snapshot: bytes | None = None
        self.records: list[LoggedInput] = []
        self.size = 0
        self._warn_at = 0

    @property
    def active(self) -> bool:
        return self.snapshot is not None

    def begin(self, snapshot: bytes) -> None:
        self.snapshot = snapshot
        self.records = []
        self.size = 0
        self._warn_at = 0

    def add(self, record: LoggedInput) -> None:
        self.records.append(record)
        self.size += input_size(record)

    def to_wire(self) -> list[list[Any]]:
        """The records as a checkpoint stores them."""
        return [r.to_wire() for r in self.records]

    def clear(self) -> None:
        self.snapshot = None
        self.records = []
        self.size = 0
        self._warn_at = 0

    def warning_due(self, warn_bytes: int | None) -> bool:
        """True once when the size passes ``warn_bytes``, and once at each doubling."""
        if not warn_bytes or warn_bytes <= 0 or self.size < max(warn_bytes, self._warn_at):
            return False
        self._warn_at = max(warn_bytes, self._warn_at)
        while self._warn_at <= self.size:
            self._warn_at *= 2
        return True

    def over(self, limit_bytes: int | None) -> bool:
        return bool(limit_bytes) and limit_bytes is not None and self.size > limit_bytes

    def warning(self, suspended: str, warn_bytes: int | None) -> str:
        """The warning's one line; ``suspended`` names the suspended handlers."""
        return (f"every checkpoint now carries {len(self.records)} inputs ({self.size} bytes) "
                f"because handlers are suspended: {suspended} (over journal_warning_bytes="
                f"{warn_bytes}; see 'Long-lived work' in the README)")

    def limit_error(self, call: str, limit_bytes: int | None) -> JournalLimitError:
        """The error an abandoned await raises in its handler."""
        return JournalLimitError(
            f"{call} was abandoned: the {len(self.records)} inputs ({self.size} bytes) "
            f"carried since handlers were suspended passed journal_limit_bytes={limit_bytes}")
