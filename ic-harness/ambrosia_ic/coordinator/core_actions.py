"""What comes out of the coordinator's core: the actions it asks the shell to run after
each event (``actions.run`` runs them, in order), and the port its replay digest is
written through (the shell's writes files, a simulation's keeps nothing). Every effect
of an event is one of these: the core returns no bytes and sets no flag for the shell."""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from ambrosia_core.wire import InitialMessage

__all__ = ["WAKE", "Action", "CheckpointData", "CheckpointReceived", "Deliver", "Digest",
           "Digests", "Durable", "InitialReceived", "LogLine", "OpenLink", "Position", "Wake"]

# (the binding's Checkpoint message, its raw chunks, the outputs snapshot)
CheckpointData = tuple[bytes, list[bytes], dict[str, Any]]
# The log's position: (the next record's sequence id, per sender the last call logged).
Position = tuple[int, dict[str, int]]


@attrs.frozen
class Durable:
    """A record is durable (``group_commit.GroupCommit.durable``): deliver its ``wire`` to
    the binding, then acknowledge its ``acks`` to their senders."""

    wire: bytes  # to deliver to the binding
    acks: dict[str, int]  # sender -> position to acknowledge (our own name excluded)


@attrs.frozen
class Deliver:
    """Write ``data`` to the binding, in the order the actions come: a request of the
    core (a checkpoint asked for, BecomingPrimary)."""

    data: bytes


@attrs.frozen
class Wake:
    """The committer has something to do (inputs to commit, a checkpoint to take)."""


WAKE = Wake()  # the one instance: asked for at most once between two takes


@attrs.frozen
class OpenLink:
    """A destination got its first output (or was restored): make its link."""

    dest: str


@attrs.frozen
class CheckpointReceived:
    """The binding streamed back checkpoint ``n`` whole; ``position`` is the log's when
    it was asked for, what the checkpoint is saved with."""

    n: int
    data: CheckpointData
    position: Position


@attrs.frozen
class InitialReceived:
    """The binding's InitialMessage came, as a first start waits for."""

    message: InitialMessage


@attrs.frozen
class LogLine:
    """Log ``text`` as one line of this coordinator's."""

    text: str


Action = Durable | Deliver | Wake | OpenLink | CheckpointReceived | InitialReceived | LogLine


class Digest(Protocol):
    """Where the replay digest of one checkpoint interval goes (see ``logstore.digest``)."""

    def add(self, output_hash: int, seq_id: int) -> None: ...

    def add_run(self, output_hashes: list[int], seq_id: int) -> None: ...


class Digests(Protocol):
    """Starts the digest of checkpoint ``n``'s interval (the previous one is finished);
    None: this coordinator keeps no digest."""

    def begin(self, n: int) -> Digest | None: ...
