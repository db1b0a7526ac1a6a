"""Outbound links: the core (``core.CoordinatorCore``) routes the binding's outputs into
one outbox per destination; here each outbox gets its link, which asks the directory
(``directory``) where its destination runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..links import OutboundLink

if TYPE_CHECKING:

    from .lifecycle import Coordinator


__all__ = ["open_link"]

# ------------------------------------------------------------------ outbound links
def open_link(c: Coordinator, dest: str) -> OutboundLink:
    """The link that runs the core's outbox for ``dest`` (started, if links may run)."""
    link = c.links.get(dest)
    if link is not None:
        return link
    where = c.directory.destination(dest)
    # Flushed by the binding's reader after each read (``reading``), not a loop turn later.
    link = OutboundLink(c.name, dest, c.secret, where.address, c.log,
                        box=c.core.outboxes[dest], flush_soon=False,
                        unreachable=where.unreachable, tls=c.tls)
    c.links[dest] = link
    if c.links_active:
        link.start()
    return link
