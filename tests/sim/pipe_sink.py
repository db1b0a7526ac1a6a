"""The connections between the coordinator's sink link and the 2PC file sink in
``pipe_world``, and the sink process itself.

A connection is two byte queues delivered in pieces. The coordinator's end is the real
``SinkSession`` (what ``sinks.SinkLink`` runs per connection); the sink's end is the real
``SinkEnd`` (its greeting and ending rules, ``sinkend``), each frame answered by the real
``sinkanswer.answer`` over the real ``FileSinkStore`` on the simulated disk
(``pipe_disk``), and the real ``SinkDoor`` choosing the connection served (a newer
accepted one replaces it, its unprepared bytes dropped by ``start_session``), as
``sinkserver.SinkServer`` runs them. Bytes a closed end had already written still
arrive (a coordinator that crashed or reconnected leaves its last frames in flight).
"""

from __future__ import annotations

import random
from pathlib import Path

import attrs
from ambrosia_services.connectors.clients import FileSinkStore, SinkStateError
from ambrosia_services.connectors.clients.sinkanswer import SinkRefusedError, answer, run_now
from ambrosia_services.connectors.clients.sinkend import Accepted, Ended, Frame, SinkDoor, SinkEnd
from ambrosia_services.connectors.clients.sinkmetrics import SinkCounts
from ambrosia_services.connectors.coordinator.sink_session import SinkSession

from ambrosia_core.wire import NEED_DATA

from .pipe_disk import SinkCrash, SinkDisk

__all__ = ["COOKIE", "MAX_FRAME", "Conn", "SinkCrash", "SinkNode"]

COOKIE = "sim-cookie"
MAX_FRAME = 1 << 20


@attrs.define(eq=False)
class Conn:
    """One connection to the sink ``sink``: ``session`` is the coordinator's end (None
    once that end closed or died), ``end`` the sink's, and the bytes in flight each
    way."""

    cid: int
    sink: str
    session: SinkSession | None
    end: SinkEnd
    to_sink: bytearray = attrs.Factory(bytearray)
    to_coord: bytearray = attrs.Factory(bytearray)
    sink_closed: bool = False  # the sink ended it: the coordinator reads its end
    eof_seen: bool = False  # ... and saw it

    @classmethod
    def open(cls, cid: int, session: SinkSession) -> Conn:
        conn = cls(cid, session.name, session, SinkEnd(COOKIE.encode(), MAX_FRAME))
        conn.to_sink += session.start().data
        return conn


class SinkNode:
    """The sink process: its store (None while it is down), the connection it serves,
    and a step of the store it is armed to crash at."""

    def __init__(self, directory: Path, disk: SinkDisk) -> None:
        self.directory = directory
        self.disk = disk
        self.store: FileSinkStore | None = None
        self.door: SinkDoor[Conn] = SinkDoor()
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
        self.door = SinkDoor()
        self.crash_at = None
        self.disk.crash(self.directory, rng)

    def receive(self, conn: Conn, data: bytes) -> None:
        """Bytes of ``conn`` reach the sink: it answers every whole frame, as the server
        does (raises ``SinkCrash`` where it was armed to)."""
        assert self.store is not None
        conn.end.receive_data(data)
        while not conn.sink_closed:
            step = conn.end.next_step()
            if step is NEED_DATA:
                return
            if isinstance(step, Ended):
                conn.to_coord += step.last
                self.close(conn)
            elif isinstance(step, Accepted):
                conn.to_coord += step.reply
                old = self.door.admit(conn)
                if old is not None:
                    self.close(old)  # a newer connection replaces it
                run_now(self.store.start_session())
            else:
                assert isinstance(step, Frame)
                try:
                    replies = run_now(answer(self.store, step.event, self.counts))
                except (SinkRefusedError, SinkStateError) as e:
                    conn.to_coord += conn.end.refused(e).last
                    self.close(conn)
                    continue
                conn.to_coord += conn.end.send(replies)

    def close(self, conn: Conn) -> None:
        """The sink ends ``conn``: what was still on its way to the sink is lost."""
        conn.sink_closed = True
        conn.to_sink.clear()
        self.door.left(conn)
