"""What the client makes of the cluster's answers, without I/O: whether an answer is
final, says "wait", or refuses and names the leader (``update_outcome``,
``config_outcome``), and where a stream of entries stands (``EntriesCursor``)."""

from __future__ import annotations

from typing import Any

from . import frames as fr
from .errors import ConfigUpdateError, RaftProtocolError, RequestExpiredError

__all__ = ["WAIT", "EntriesCursor", "Outcome", "Redirect", "config_outcome",
           "update_outcome"]


class _Wait:
    """An answer that says "accepted, not final yet": restart the response clock."""


class Redirect:
    """A refusal, naming the leader if the peer knows one."""

    def __init__(self, leader_id: str | None) -> None:
        self.leader_id = leader_id


WAIT = _Wait()
Outcome = tuple[bool, Any]  # (final, value) or the markers above


def update_outcome(reply: list[bytes]) -> Any:
    """A RequestUpdate's answer: ``(True, index)``, ``WAIT`` or a ``Redirect``.

    Raises:
        RequestExpiredError: the cluster refused the update: its request id expired.
    """
    got = fr.parse_update(reply)
    if got.status == 1:
        return (True, got.index) if got.index is not None else WAIT
    if not got.has_detail:
        raise RequestExpiredError("the cluster refused the update: its request id expired")
    return Redirect(got.leader_id)


def config_outcome(reply: list[bytes]) -> Any:
    """A ConfigUpdate's answer: ``(True, index)``, ``WAIT`` or a ``Redirect``.

    Raises:
        RequestExpiredError: its request id expired.
        ConfigUpdateError: the cluster refused the configuration, or is busy with an
            earlier change.
    """
    got = fr.parse_update(reply, config=True)
    if got.status == 1:
        return (True, got.index) if got.index is not None else WAIT
    if got.status == 0:
        return Redirect(got.leader_id)
    if got.status == 4:
        raise RequestExpiredError("the cluster refused the configuration change: its "
                                  "request id expired")
    if got.status == 3:
        raise ConfigUpdateError("the cluster is busy with an earlier configuration change")
    raise ConfigUpdateError(f"the cluster refused the configuration: {got.error!r}")


class EntriesCursor:
    """Where a RequestEntries stream stands: the last index received (``prev``), the
    offset into a snapshot being sent in chunks, and how many entries are still wanted
    (``count``; None: up to the commit index)."""

    def __init__(self, prev: int, count: int | None) -> None:
        self.prev = prev
        self.offset = 0
        self.count = count

    def check(self, got: fr.EntriesReply) -> None:
        """``got`` follows what came before.

        Raises:
            RaftProtocolError: entries or chunks came out of order.
        """
        if got.chunk is not None:
            if got.chunk.offset != self.offset:
                raise RaftProtocolError(f"RequestEntries: snapshot chunk at {got.chunk.offset}"
                                        f" where {self.offset} was due")
            self.offset = got.chunk.offset + len(got.chunk.data)
            return
        if got.last_index - len(got.entries) != self.prev:
            raise RaftProtocolError(f"RequestEntries: entries up to {got.last_index} do not "
                                    f"follow index {self.prev}")

    def follow_up(self, rid: bytes, secret: bytes, got: fr.EntriesReply
                  ) -> list[bytes] | None:
        """The request for what follows ``got`` (None: the entries wanted all came)."""
        msg = [rid, fr.REQUEST_ENTRIES, secret]
        count = self.count
        if got.chunk is not None and not got.chunk.last:
            return [*msg, fr.encode_uint(self.prev), fr.encode_nuint(count),
                    fr.encode_uint(self.offset)]
        self.prev = got.last_index
        self.offset = 0
        if count is not None:
            count -= 1 if got.chunk is not None else len(got.entries)
            self.count = count
            if count <= 0:
                return None
            return [*msg, fr.encode_uint(got.last_index), fr.encode_nuint(count)]
        return [*msg, fr.encode_uint(got.last_index)]

    def stop(self, rid: bytes, secret: bytes) -> list[bytes]:
        """The request that tells the peer to stop streaming (count 0)."""
        return [rid, fr.REQUEST_ENTRIES, secret, fr.encode_uint(self.prev or 0),
                fr.encode_nuint(0)]
