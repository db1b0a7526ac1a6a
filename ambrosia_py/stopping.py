"""Why an instance stops being primary: the runner knows, the immortal may need to.

Side effects that hold something on the instance's behalf (a lease, a child process, a
client's session) end differently when the instance stops on purpose, while its
coordinator may still be running, and when the coordinator is gone (killed, fenced by a
newer primary, failed over): then another life takes over what they held, and nothing
may be recorded for this one any more.
"""

from __future__ import annotations

import enum

__all__ = ["StopReason"]


class StopReason(enum.Enum):
    """Why the runtime stops the instance (``ctx.stop_reason``, ``Immortal.on_stop``)."""

    #: An ordinary stop: a stop signal, or the runner's ``stop()``.
    STOPPED = "stopped"
    #: The coordinator closed or broke the connection without a stop being asked: it
    #: died, was fenced, or a failover moved the instance to another primary.
    COORDINATOR_LOST = "coordinator lost"
    #: The binding itself failed (a handler's or the protocol's error ended the run).
    FAILED = "failed"
