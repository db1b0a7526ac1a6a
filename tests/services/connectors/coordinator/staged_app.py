"""A connector coordinator that stages what it receives and commits one summary line per
staged block (``stream first last count size``), releasing each block once every sink
has committed its line: the listener's staging, back-pressure and segment collection
under test, with output a test can check exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ambrosia_services.connectors import ConnectorCoordinator, CoordinatorConfig
from ambrosia_services.staging import Ref

from ..tuned_app import tuned_config


class StagedSummary(ConnectorCoordinator):
    uses_staging: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.held: list[list[Any]] = []  # [{sink: end of its line}, ref], in order

    def coordinator_config(self) -> CoordinatorConfig:
        return tuned_config(self.ctx.config)  # a [tuning] table: small segments

    def on_staged(self, stream_id: int, refs: Sequence[Ref]) -> None:
        for ref in refs:
            line = f"{ref.stream_id} {ref.first_id} {ref.last_id} {ref.count} {ref.size}\n"
            ends = {}
            for sink in self.core.settings["sinks"]:
                self.emit(sink, line.encode())
                rec = self.core.sinks[sink]
                ends[sink] = rec.committed + len(rec.pending)
            self.held.append([ends, ref.to_list()])

    def on_committed(self) -> None:
        done = 0
        for ends, ref in self.held:
            if any(self.core.sinks[s].committed < end for s, end in ends.items()):
                break
            self.release([Ref.from_list(ref)])
            done += 1
        del self.held[:done]

    def checkpoint_state(self) -> Any:
        return {"core": super().checkpoint_state(), "held": self.held}

    def load_state(self, state: Any) -> None:
        super().load_state(state["core"])
        self.held = [list(h) for h in state["held"]]


class PayloadRouter(ConnectorCoordinator):
    """Routes applied payloads itself (``on_messages``) and has no ``on_staged``: it keeps
    payloads, so it cannot run with a staging root."""

    def on_messages(self, stream_id: int, messages: Sequence[Any]) -> None:
        for m in messages:
            for sink in self.core.settings["sinks"]:
                self.emit(sink, m.payload.upper())
