"""The durable side of a 2PC sink, as the server sees it: a ``SinkStore`` answers each
request once what it promised is durable, with a ``Vote`` for a Phase1 and ``Prepared``
transactions to list. The file store (``sinkstore``) and the PostgreSQL store
(``pgstore``) implement it; neither needs the server.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import attrs

__all__ = ["DATA_STREAM_ID", "Prepared", "SinkStore", "Vote"]

DATA_STREAM_ID = 1  # a sink's output travels on stream 1; stream 0 carries 2PC


@attrs.frozen
class Prepared:
    """A transaction whose Phase1 this sink voted yes on: ``[start, end)`` of the output."""

    txn_id: str
    start: int
    end: int


@attrs.frozen
class Vote:
    """The answer to a Phase1, with the reason for a no (logged by the server)."""

    commit: bool
    reason: str = ""


class SinkStore(abc.ABC):
    """The durable side of a 2PC sink: its output, committed offset and prepared
    transactions. The server calls it one request at a time and answers only after the
    call returned, so whatever a call promised must be durable when it returns.

    ``committed_offset`` is the end of the committed output; ``output_offset`` the next
    byte's offset (committed + prepared + written since).
    """

    committed_offset: int
    output_offset: int

    @abc.abstractmethod
    async def start_session(self) -> None:
        """A new connection was accepted: bytes written but not prepared are dropped (the
        peer sends them again from the offset its NOTIFY_ACK gets), and a store that can
        lose track of its prepared transactions learns them again here."""

    @abc.abstractmethod
    def write(self, message_id: int, payload: bytes) -> bool:
        """Take a data message whose id must be the output offset.

        Returns False (and keeps nothing) for an id beyond the output offset: data was
        lost in between, so the next Phase1 votes no.

        Raises:
            SinkStateError: an id below the output offset (a duplicate).
        """

    @abc.abstractmethod
    async def prepare(self, txn_id: str, ranges: Sequence[tuple[int, int, int]]) -> Vote:
        """Phase1: vote on ``ranges`` (stream id, start, end); a yes is durable first."""

    @abc.abstractmethod
    async def commit(self, txn_id: str) -> bool:
        """Phase2 commit. Returns False when ``txn_id`` was committed already (a repeated
        Phase2: nothing to do).

        Raises:
            SinkStateError: ``txn_id`` is neither prepared nor the last committed.
        """

    @abc.abstractmethod
    async def abort(self, txn_id: str) -> None:
        """Phase2 abort: drop the uncommitted bytes of ``txn_id`` and after it, never
        below the committed offset (nor below a different prepared transaction).

        Raises:
            SinkStateError: ``txn_id`` was committed already.
        """

    @abc.abstractmethod
    async def uncommitted(self) -> list[str]:
        """The transactions prepared and not yet decided (ListUncommitted's answer)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the store holds (files, locks, connections)."""
