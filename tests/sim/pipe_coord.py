"""The coordinator's side of ``pipe_world``: one life of the real connector coordinator
on the binding's real engine (``InMemoryCoordinator``), the stand-in for its I/O shell,
and its end of the sink link (the real ``SinkSession``, stepped as ``sinks.SinkLink``
steps it: the session's reports become the real Impulses, an abort ends the connection).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ambrosia_services.connectors import ConnectorProtocolError
from ambrosia_services.connectors.coordinator.immortal import ConnectorCoordinator
from ambrosia_services.connectors.coordinator.sink_session import (
    Decided,
    Read,
    ReportUncommitted,
    ReportVote,
    SinkLinkError,
    Write,
)

from ambrosia_core.wire import TakeBecomingPrimaryCheckpoint, encode_control_record
from ambrosia_py.testing.inmemory import InMemoryCoordinator

from .pipe_sink import COOKIE, MAX_FRAME, Conn

if TYPE_CHECKING:
    from .pipe_world import PipeWorld

__all__ = ["INSTANCE", "Coordinator", "SimLive", "config"]

INSTANCE = "pipe"


def config(sinks: list[str]) -> dict[str, Any]:
    """The coordinator's configuration: every emitted byte is cut into a transaction at
    once (``interval_bytes`` 1), so no decision waits on a clock."""
    return {"sinks": {name: "127.0.0.1:9" for name in sinks}, "interval_bytes": 1,
            "interval_seconds": 3600, "cookie": COOKIE, "max_frame_size": MAX_FRAME}


class _NoLoop:
    """The engine's loop for side effects: the primary's I/O is this world's, so the
    stand-in's ``run`` is never run."""

    def create_task(self, coro: Any) -> _Never:
        coro.close()
        return _Never()


class _Never:
    def add_done_callback(self, _fn: Any) -> None:
        pass


class SimLive:
    """Stands in for ``live.Live``: hears which ``receive`` Impulses were applied live
    (the listener's ACKs) and nothing else; this world does the listener's and the
    link's sending."""

    def __init__(self, world: PipeWorld, owner: ConnectorCoordinator) -> None:
        self.world = world
        self.owner = owner

    async def run(self) -> None:  # never run (``_NoLoop``)
        pass

    def wake(self) -> None:
        pass

    def applied(self, token: int) -> None:
        self.world.acks.append(token)  # on its way to the source


class Coordinator:
    """One life of the coordinator: an engine recovering or starting, then primary, and
    its link's connection to each sink."""

    immortal: type[ConnectorCoordinator] = ConnectorCoordinator

    def __init__(self, world: PipeWorld) -> None:
        self.world = world
        self.ic = InMemoryCoordinator(self.immortal, INSTANCE, config=world.config)
        self.ic.engine.attach(_NoLoop(), lambda: None)  # type: ignore[arg-type]
        self.live: SimLive | None = None
        self.conns: dict[str, Conn] = {}  # sink -> the link's connection
        self.reported: tuple[str, tuple[Any, ...]] | None = None  # the last report sent

    @property
    def app(self) -> ConnectorCoordinator:
        inst = self.ic.instance
        assert inst is not None
        return cast(ConnectorCoordinator, inst)

    def first_start(self) -> None:
        self.ic.feed(encode_control_record(7, TakeBecomingPrimaryCheckpoint()))
        self.world.checkpoint = (self.ic.checkpoint, 0)
        while self.ic.to_self:
            self.log_one()

    def recover(self) -> None:
        data, position = self.world.checkpoint
        self.ic.recover(data, self.world.log[position:])

    def log_one(self) -> None:
        """The next input waiting is logged and applied (the links look again after)."""
        record = self.ic.to_self.pop(0)
        self.world.log.append(record)
        self.ic.record(record)
        self.world.observe(self.app)

    def impulse(self, name: str, *args: Any) -> None:
        getattr(self.app.impulse_self, name)(*args)
        self.ic.pump()

    def report(self, name: str, *args: Any) -> None:
        """What a sink said, as the link's Impulse (kept: a fault sends it again)."""
        self.reported = (name, args)
        self.impulse(name, *args)

    def link(self, sink: str) -> None:
        """Step the session of ``sink``'s link as far as the state and the sink's frames
        allow, as ``SinkLink`` does: its reports become Impulses, an abort ends the
        connection (the bytes go again on a new one)."""
        conn = self.conns.get(sink)
        if conn is None or conn.session is None:
            return
        session = conn.session
        rec = self.app.core.sinks.get(sink)
        rec = rec if rec is not None and rec.active else None
        try:
            while actions := session.step(rec):
                while actions:
                    action = actions.pop(0)
                    if isinstance(action, Write):
                        conn.to_sink += action.data
                    elif isinstance(action, ReportUncommitted):
                        self.report("sink_uncommitted", sink, action.rtag,
                                    list(action.txn_ids))
                    elif isinstance(action, ReportVote):
                        self.report("sink_voted", sink, action.txn_id, action.commit)
                    elif isinstance(action, Read):
                        data = b"".join(p for p in action.parts if isinstance(p, bytes))
                        actions[:0] = session.materialized(data)
                    elif isinstance(action, Decided) and not action.commit:
                        raise SinkLinkError("aborted: connect again")
        except ConnectorProtocolError:
            conn.to_sink += session.error_frame()
            self.close_link(sink)
        except SinkLinkError:
            self.close_link(sink)

    def close_link(self, sink: str) -> None:
        """The link ends its connection (what it wrote still reaches the sink)."""
        conn = self.conns.pop(sink, None)
        if conn is not None:
            conn.session = None
            conn.to_coord.clear()
