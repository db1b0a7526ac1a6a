"""Reading the binding: its bytes go to the core (``core.CoordinatorCore``), which
routes its outputs and acts on its other messages; then the core's actions run, the
links write what it queued, and what it brought is committed. Malformed bytes or a
message a binding must not send end the coordinator with one line saying so.

``BindingReader`` is the receive connection's protocol: each read is parsed, routed and
committed in its own callback (``commit.after_burst``), with no task between the socket
and the log. It never pauses the binding: the binding may be waiting for room to write
while the coordinator waits for it to read what was delivered, and only reading both
ways at once keeps that from locking up (back-pressure goes to the links instead).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from ambrosia_core.errors import RemoteProtocolError

from . import actions, commit

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["EXIT_BINDING_LOST", "EXIT_MALFORMED", "BindingReader"]

EXIT_BINDING_LOST = 1
EXIT_MALFORMED = 2

# A failure, whatever the binding meant: an end of the connection looks the same whether
# the binding stopped or crashed, and a supervisor must restart the pair after a crash.
# The ordinary stop of an instance is its coordinator's (SIGTERM or SIGINT: exit 0 or 130).
_LOST = ("the binding closed its connection; exiting with code 1, a failure: a binding "
         "that stopped and one that crashed look the same here (restart the coordinator "
         "and the binding together to recover; to stop the instance, stop its coordinator)")


class BindingReader(asyncio.Protocol):
    """Reads until the binding goes away; what its bytes mean is the core's
    (``CoordinatorCore.receive_binding``)."""

    def __init__(self, c: Coordinator) -> None:
        self.c = c
        self.transport: asyncio.Transport | None = None
        self.failed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)
        self.c.binding_receive = self.transport

    def data_received(self, data: bytes) -> None:
        if self.failed or self.c.notice_given:
            return  # after a superseded replica's notice: read, so that none is unread
        c = self.c
        try:
            c.core.receive_binding(data)
        except RemoteProtocolError as err:
            self._fail(EXIT_MALFORMED, f"binding sent malformed bytes: {err}")
            return
        except Exception as err:  # any other error: one line, as for a task
            self.failed = True
            c.fail(err)
            return
        finally:
            # Before any output of this read leaves the process.
            if c.digest_file is not None:
                c.digest_file.flush()
        actions.run(c)
        for link in c.links.values():
            link.flush()
        commit.after_burst(c)

    def eof_received(self) -> bool:
        self._fail(EXIT_BINDING_LOST, _LOST)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.c.binding_gone.set()
        self._fail(EXIT_BINDING_LOST, _LOST)

    def _fail(self, code: int, message: str) -> None:
        if not self.failed:
            self.failed = True
            self.c.finish(code, message)
            if self.transport is not None:
                self.transport.close()
