"""Running what the core asks for (``core.Action``), after each of its events: open a
link, hand a checkpoint or the InitialMessage to the flow that waits for it, log a
line, wake the committer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core import CheckpointReceived, InitialReceived, LogLine, OpenLink
from .outputs import open_link

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["link_to", "restore", "run"]


def run(c: Coordinator) -> None:
    """Run what the core asked for since the last time."""
    core = c.core
    if core.actions:
        for action in core.take_actions():
            if type(action) is OpenLink:
                open_link(c, action.dest)
            elif type(action) is CheckpointReceived:
                fut, c.checkpoint_wait = c.checkpoint_wait, None
                if fut is not None and not fut.done():
                    fut.set_result(action.data)
            elif type(action) is InitialReceived:
                if c.initial is not None and not c.initial.done():
                    c.initial.set_result(action.message)
            elif type(action) is LogLine:
                c.log(action.text)
    if core.wake:
        core.wake = False
        c.wake.set()


def restore(c: Coordinator, next_seq: int, inputs: dict[str, int],
            outputs: dict[str, dict[str, Any]]) -> None:
    """Take back a checkpoint's position and outputs snapshot (``core.restore``), and
    make the links it names."""
    c.core.restore(next_seq, inputs, outputs)
    run(c)


def link_to(c: Coordinator, dest: str) -> Any:
    """The outbound link to ``dest``, made on first use."""
    c.core.outbox(dest)
    run(c)
    return c.links[dest]
