"""The connections between the coordinator's sink link and the 2PC file sink in
``pipe_world``, and the sink process itself.

A connection is two byte queues delivered in pieces. The coordinator's end is the real
``SinkSession`` (what ``sinks.SinkLink`` runs per connection); the sink's end is the real
``ConnectorConnection`` answered by the real ``sinkanswer.answer`` over the real
``FileSinkStore`` on the simulated disk (``pipe_disk``), as ``sinkserver.SinkServer``
serves it: HELLO answered with OK, one connection served at a time (a newer accepted one
replaces it, its unprepared bytes dropped by ``start_session``), ERROR and the end of the
connection for what the sink refuses. Bytes a closed end had already written still
arrive (a coordinator that crashed or reconnected leaves its last frames in flight).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import cast

import attrs
from ambrosia_services.connectors import (
    ConnectionClosed,
    ConnectorConnection,
    ConnectorProtocolError,
    ErrorFrame,
    Event,
    Hello,
    Ok,
    Role,
)
from ambrosia_services.connectors.clients import FileSinkStore, SinkStateError
from ambrosia_services.connectors.clients.sinkanswer import SinkRefusedError, answer, run_now
from ambrosia_services.connectors.clients.sinkmetrics import SinkCounts
from ambrosia_services.connectors.clients.sinkserver import SINK_CREDITS
from ambrosia_services.connectors.coordinator.sink_session import SinkSession

from ambrosia_core.wire import NEED_DATA

from .pipe_disk import SinkCrash, SinkDisk

__all__ = ["COOKIE", "MAX_FRAME", "Conn", "SinkCrash", "SinkNode"]

COOKIE = "sim-cookie"
MAX_FRAME = 1 << 20


@attrs.define(eq=False)
class Conn:
    """One connection to the sink ``sink``: ``session`` is the coordinator's end (None
    once that end closed or died), ``worker`` the sink's (``accepted`` once its HELLO
    was), and the bytes in flight each way."""

    cid: int
    sink: str
    session: SinkSession | None
    worker: ConnectorConnection
    to_sink: bytearray = attrs.Factory(bytearray)
    to_coord: bytearray = attrs.Factory(bytearray)
    accepted: bool = False
    sink_closed: bool = False  # the sink ended it: the coordinator reads its end
    eof_seen: bool = False  # ... and saw it

    @classmethod
    def open(cls, cid: int, session: SinkSession) -> Conn:
        worker = ConnectorConnection(Role.WORKER, cookie=COOKIE.encode(), twopc=True,
                                     max_frame_size=MAX_FRAME)
        conn = cls(cid, session.name, session, worker)
        conn.to_sink += session.start().data
        return conn


class SinkNode:
    """The sink process: its store (None while it is down), the connection it serves,
    and a step of the store it is armed to crash at."""

    def __init__(self, directory: Path, disk: SinkDisk) -> None:
        self.directory = directory
        self.disk = disk
        self.store: FileSinkStore | None = None
        self.served: Conn | None = None
        self.crash_at: str | None = None
        self.counts = SinkCounts()
        self.restarts = 0

    def _step(self, name: str) -> None:
        if name == self.crash_at:
            self.crash_at = None
            raise SinkCrash(name)

    def start(self) -> None:
        """The sink starts: the store recovers its directory (a refusal is the caller's
        ``SinkStoreCorruptError``)."""
        self.store = FileSinkStore(self.directory, on_step=self._step)
        self.restarts += 1

    def crash(self, rng: random.Random) -> None:
        self.store = None
        self.served = None
        self.crash_at = None
        self.disk.crash(self.directory, rng)

    def receive(self, conn: Conn, data: bytes) -> None:
        """Bytes of ``conn`` reach the sink: it answers every whole frame, as the server
        does (raises ``SinkCrash`` where it was armed to)."""
        assert self.store is not None
        conn.worker.receive_data(data)
        while not conn.sink_closed:
            try:
                event = conn.worker.next_event()
            except ConnectorProtocolError:
                conn.to_coord += conn.worker.take_error_frame()
                self.close(conn)
                return
            if event is NEED_DATA:
                return
            if isinstance(event, ConnectionClosed | ErrorFrame):
                self.close(conn)
            elif not conn.accepted:
                if not isinstance(event, Hello):
                    self.close(conn)
                    continue
                conn.to_coord += conn.worker.send(Ok(SINK_CREDITS))
                conn.accepted = True
                if self.served is not None and self.served is not conn:
                    self.close(self.served)  # a newer connection replaces it
                self.served = conn
                run_now(self.store.start_session())
            else:
                try:
                    replies = run_now(answer(self.store, cast(Event, event), self.counts))
                except (SinkRefusedError, SinkStateError) as e:
                    conn.to_coord += conn.worker.send(ErrorFrame(str(e)))
                    self.close(conn)
                    continue
                for reply in replies:
                    conn.to_coord += conn.worker.send(reply)

    def close(self, conn: Conn) -> None:
        """The sink ends ``conn``: what was still on its way to the sink is lost."""
        conn.sink_closed = True
        conn.to_sink.clear()
        if self.served is conn:
            self.served = None
