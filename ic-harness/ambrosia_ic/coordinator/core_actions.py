"""What comes out of the coordinator's core: the actions it asks the shell to run after
each event (``actions.run`` runs them), and the port its replay digest is written
through (the shell's writes files, a simulation's keeps nothing)."""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from ambrosia_core.wire import InitialMessage

__all__ = ["Action", "CheckpointData", "CheckpointReceived", "Digest", "Digests",
           "InitialReceived", "LogLine", "OpenLink"]

# (the binding's Checkpoint message, its raw chunks, the outputs snapshot)
CheckpointData = tuple[bytes, list[bytes], dict[str, Any]]

@attrs.frozen
class OpenLink:
    """A destination got its first output (or was restored): make its link."""

    dest: str


@attrs.frozen
class CheckpointReceived:
    """The binding streamed back checkpoint ``n`` whole."""

    n: int
    data: CheckpointData


@attrs.frozen
class InitialReceived:
    """The binding's InitialMessage came, as a first start waits for."""

    message: InitialMessage


@attrs.frozen
class LogLine:
    text: str


Action = OpenLink | CheckpointReceived | InitialReceived | LogLine


class Digest(Protocol):
    """Where the replay digest of one checkpoint interval goes (see ``logstore.digest``)."""

    def add(self, output_hash: int, seq_id: int) -> None: ...

    def add_run(self, output_hashes: list[int], seq_id: int) -> None: ...


class Digests(Protocol):
    """Starts the digest of checkpoint ``n``'s interval (the previous one is finished);
    None: this coordinator keeps no digest."""

    def begin(self, n: int) -> Digest | None: ...
