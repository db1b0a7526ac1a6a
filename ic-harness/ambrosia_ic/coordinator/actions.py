"""Running what the core asks for (``core.Action``), in one place, after each of its
events: deliver bytes to the binding, acknowledge senders, wake the committer, open a
link, hand a checkpoint or the InitialMessage to the flow that waits for it, log a line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core import (
    CheckpointReceived,
    Deliver,
    Durable,
    InitialReceived,
    LogLine,
    OpenLink,
    Wake,
)
from .outputs import open_link

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["run"]


def run(c: Coordinator) -> None:
    """Run what the core asked for since the last time, in order."""
    core = c.core
    if not core.actions:
        return
    for action in core.take_actions():
        # The common ones first: a record made durable, the committer woken.
        if type(action) is Durable:
            c.deliver(action.wire)
            c.link_server.acknowledge(action.acks)
        elif type(action) is Wake:
            c.wake.set()
        elif type(action) is Deliver:
            c.deliver(action.data)
        elif type(action) is OpenLink:
            open_link(c, action.dest)
        elif type(action) is CheckpointReceived:
            fut, c.checkpoint_wait = c.checkpoint_wait, None
            if fut is not None and not fut.done():
                fut.set_result(action)
        elif type(action) is InitialReceived:
            if c.initial is not None and not c.initial.done():
                c.initial.set_result(action.message)
        elif type(action) is LogLine:
            c.log(action.text)
