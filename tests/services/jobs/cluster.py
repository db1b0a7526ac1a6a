"""An initiator and its runners joined in memory: real connections, real bytes, no network.

Every link is a pair of ``JobConnection`` objects with a byte queue in each direction; the
test decides when (and in which pieces) a queue is delivered, so races such as a batch
overtaking a ``start`` are played out exactly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from ambrosia_services.jobs import (
    InitiatorJobs,
    JobConnection,
    JobEffect,
    JobMessage,
    ParticipantJobs,
    Role,
    Send,
)

Table = InitiatorJobs | ParticipantJobs


class Cluster:
    """Members by id; links between the initiator and each runner, and between runners.

    Args:
        initiator: the coordinator's job table.
        runners: each runner's job table.
        initial_credits: every stream's starting credit.
    """

    def __init__(
        self, initiator: InitiatorJobs, runners: Iterable[ParticipantJobs], initial_credits: int
    ) -> None:
        self.credits = initial_credits
        self.initiator = initiator
        self.tables: dict[uuid.UUID, Table] = {initiator.member_id: initiator}
        self.roles: dict[uuid.UUID, Role] = {initiator.member_id: Role.INITIATOR}
        for runner in runners:
            self.tables[runner.member_id] = runner
            self.roles[runner.member_id] = Role.PARTICIPANT
        self.conns: dict[tuple[uuid.UUID, uuid.UUID], JobConnection] = {}
        self.queues: dict[tuple[uuid.UUID, uuid.UUID], bytearray] = {}
        members = list(self.tables)
        for a in members:
            for b in members:
                if a != b:
                    self._connect(a, b)
        self.sent: list[tuple[uuid.UUID, uuid.UUID, JobMessage]] = []

    def _connect(self, here: uuid.UUID, there: uuid.UUID) -> None:
        """(Re)open ``here``'s end of the link to ``there``; bytes in flight are lost."""
        self.conns[(here, there)] = JobConnection(
            self.roles[here], self.roles[there], initial_credits=self.credits
        )
        self.queues[(here, there)] = bytearray()

    def conn(self, here: uuid.UUID, there: uuid.UUID) -> JobConnection:
        return self.conns[(here, there)]

    def send(self, src: uuid.UUID, dst: uuid.UUID, msg: JobMessage) -> None:
        """``src`` sends ``msg`` to ``dst``: its bytes join the queue of that link."""
        self.queues[(src, dst)] += self.conns[(src, dst)].send(msg)
        self.sent.append((src, dst, msg))

    def apply(self, src: uuid.UUID, effects: Iterable[JobEffect]) -> list[JobEffect]:
        """Carry out ``src``'s Send effects; return the others."""
        rest = []
        for effect in effects:
            if isinstance(effect, Send):
                self.send(src, effect.to, effect.message)
            else:
                rest.append(effect)
        return rest

    def deliver(self, src: uuid.UUID, dst: uuid.UUID, *, one_byte_at_a_time: bool = False
                ) -> list[JobEffect]:
        """Hand everything queued from ``src`` to ``dst``; return ``dst``'s effects (its
        sends are queued on their links, not returned)."""
        data = bytes(self.queues[(src, dst)])
        self.queues[(src, dst)].clear()
        conn = self.conns[(dst, src)]
        pieces = [data[i : i + 1] for i in range(len(data))] if one_byte_at_a_time else [data]
        out: list[JobEffect] = []
        for piece in pieces:
            conn.receive_data(piece)
            for msg in conn.events():
                out.extend(self.apply(dst, self.tables[dst].handle(src, msg)))
        return out

    def lose(self, src: uuid.UUID, dst: uuid.UUID) -> None:
        """Drop what is queued from ``src`` to ``dst`` (whole frames), as a crash of
        ``src`` would have: the messages were sent but never arrive."""
        self.queues[(src, dst)].clear()

    def queued(self, src: uuid.UUID, dst: uuid.UUID) -> int:
        return len(self.queues[(src, dst)])

    def fail_over(self, new_initiator: InitiatorJobs) -> None:
        """A new primary takes the initiator's place: every link to it is reopened and the
        bytes in flight on those links are lost."""
        member = new_initiator.member_id
        assert member == self.initiator.member_id
        self.initiator = new_initiator
        self.tables[member] = new_initiator
        for other in self.tables:
            if other != member:
                self._connect(member, other)
                self._connect(other, member)
