"""What every replica of an active/active instance shares, whatever holds its log: the
coordinator it runs (a fenced sink, the replica's own ports and link hosts, its links
idle until it is primary), what its epoch claims say about it, and the delivery of
records another replica wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.superseded import SUPERSEDED

from .. import registry
from ..coordinator import Coordinator, LinkOptions
from ..coordinator.directory import DirectoryFactory
from ..coordinator.sink import FencedSink
from ..logstore import DiskRecord

__all__ = ["claim_info", "deliver_records", "notify_superseded", "replica_coordinator"]


def replica_coordinator(reg: registry.Registration, home: Path, replica: int,
                        sink: FencedSink, *, stdout: TextIO | None = None,
                        stderr: TextIO | None = None, fsync_in_thread: bool | None = None,
                        link: LinkOptions | None = None,
                        directory: DirectoryFactory | None = None
                        ) -> tuple[Coordinator, registry.Replica]:
    """The coordinator replica ``replica`` runs, writing through ``sink``.

    Raises:
        CoordinatorError: the instance is not active/active.
    """
    if not reg.active_active:
        raise CoordinatorError(
            f"{reg.instance_name} is not registered with --active-active; run it "
            "without --replica"
        )
    c = Coordinator(reg, home, replica=replica, stdout=stdout, stderr=stderr, sink=sink,
                    fsync_in_thread=fsync_in_thread, link=link, directory=directory,
                    who=f"{reg.instance_name}: replica {replica}")
    rep = registry.replica(reg, replica, home)
    c.set_link_hosts(rep.ic_host, rep.advertise_host)
    c.receive_port = rep.receive_port
    c.send_port = rep.send_port
    c.ic_port = c.link_server.port = rep.ic_port
    c.links_active = False
    return c, rep


def claim_info(c: Coordinator, number: int, **extra: Any) -> dict[str, Any]:
    """What an epoch claim says of its replica: senders dial its holder there."""
    return {"replica": number, "ic_host": c.advertise, "ic_port": c.ic_port, **extra}


def deliver_records(c: Coordinator, recs: Sequence[DiskRecord]) -> None:
    """A follower delivers records another replica wrote (the log's position moves)."""
    for rec in recs:
        c.deliver(rec.wire)
        c.core.followed(rec.seq_id, rec.inputs)
    if recs:
        c.core.caught_up()


def notify_superseded(c: Coordinator) -> None:
    """Tell the binding that a newer primary superseded this replica, so that it starts
    over (``ambrosia_core.superseded``): the notice on its receive connection, then this
    end's half of it closed, before the send connection closes. What the binding still
    sends is read and dropped until it closes its end (``Coordinator.shutdown``)."""
    t = c.binding_receive
    if t is not None and not t.is_closing():
        t.write(SUPERSEDED)
        if t.can_write_eof():
            t.write_eof()
        c.notice_given = True
