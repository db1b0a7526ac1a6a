"""A Raft store's claim and fenced append as steps (``logstore.raft_tenure``), taken here
over an in-memory log with a hand-set clock: the exact steps each situation asks for, and
no entry proposed by a store whose epoch is superseded. The simulator (``tests/sim/
raftlog``) and the real cluster's tests (``tests/raft``) run the same steps."""

from __future__ import annotations

from typing import Any

import pytest
from ambrosia_ic.errors import LockLostError
from ambrosia_ic.logstore.raft_entries import encode_claim, encode_heartbeat, encode_records
from ambrosia_ic.logstore.raft_tenure import CatchUp, Propose, RaftTenure, Renewed, Steps

NAME = "inst"
LEASE = 1.0


class Log:
    """A committed log that several tenures read; ``before_next`` lands an entry of
    someone else's just before the next one proposed."""

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes]] = []
        self.before_next: bytes | None = None
        self.clock = 0.0

    def add(self, data: bytes) -> tuple[bytes, int]:
        reqid = len(self.entries).to_bytes(12, "big")
        self.entries.append((reqid, data))
        return reqid, len(self.entries)

    def tenure(self) -> RaftTenure:
        return RaftTenure(NAME, lambda: self.clock, LEASE)

    def run(self, t: RaftTenure, steps: Steps,
            taken: list[Any] | None = None) -> Any:
        """Take ``steps`` for ``t``; what they return (``taken``: each step, in order)."""
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                return done.value
            if taken is not None:
                taken.append(step)
            answer = None
            if isinstance(step, CatchUp):
                asked = self.clock
                events = [ev for i, (reqid, data) in enumerate(self.entries)
                          if i >= t.view.last_index
                          for ev in t.view.apply(i + 1, reqid, data)]
                t.read(asked, events)
            elif isinstance(step, Propose):
                if self.before_next is not None:
                    self.add(self.before_next)
                    self.before_next = None
                answer = self.add(step.data)


def _records(epoch: int) -> bytes:
    return encode_records(NAME, epoch, [b"r"])


def _primary(log: Log) -> RaftTenure:
    t = log.tenure()
    assert log.run(t, t.claim({"replica": 0})) is True
    assert t.held == 1
    return t


def test_a_first_claim_reads_sends_and_reads_up_to_it() -> None:
    log = Log()
    t = log.tenure()
    taken: list[Any] = []
    assert log.run(t, t.claim({"replica": 0}), taken) is True
    assert taken == [CatchUp(), Propose(encode_claim(NAME, 1, {"replica": 0})), CatchUp(1)]
    assert (t.held, t.holder, t.counted_sent_at) == (1, {"replica": 0}, 0.0)


def test_within_half_a_lease_an_append_sends_at_once_and_counts_once_read_back() -> None:
    log = Log()
    t = _primary(log)
    log.clock = LEASE / 2  # not past half a lease since the claim was sent
    taken: list[Any] = []
    assert log.run(t, t.append(_records), taken) == 2
    assert taken == [Propose(_records(1)), CatchUp(2)]
    assert t.counted_sent_at == LEASE / 2


def test_past_half_a_lease_an_append_looks_and_renews_its_epoch_before_it_sends() -> None:
    log = Log()
    t = _primary(log)
    log.clock = LEASE / 2 + 0.01
    taken: list[Any] = []
    assert log.run(t, t.append(_records), taken) == 3
    assert taken == [CatchUp(), CatchUp(), Propose(encode_claim(NAME, 2, {"replica": 0})),
                     CatchUp(2), Renewed(2), Propose(_records(2)), CatchUp(3)]
    assert t.held == 2


def test_a_primary_that_finds_a_newer_claim_when_it_looks_proposes_nothing() -> None:
    log = Log()
    t = _primary(log)
    log.add(encode_claim(NAME, 2, {"replica": 1}))  # a standby took over meanwhile
    log.clock = 5.0
    taken: list[Any] = []
    with pytest.raises(LockLostError, match="epoch 2 was claimed after this primary's "
                                            "epoch 1"):
        log.run(t, t.append(_records), taken)
    assert taken == [CatchUp()]
    # Known superseded: not even a look.
    with pytest.raises(LockLostError):
        log.run(t, t.append(_records), taken)
    assert taken == [CatchUp()]


def test_a_renewal_that_loses_its_epoch_to_another_claim_proposes_no_entry() -> None:
    log = Log()
    t = _primary(log)
    log.clock = 5.0
    log.before_next = encode_claim(NAME, 2, {"replica": 1})  # lands just before ours
    taken: list[Any] = []
    with pytest.raises(LockLostError, match="epoch 2 was claimed after"):
        log.run(t, t.append(_records), taken)
    proposed = [s for s in taken if isinstance(s, Propose)]
    assert proposed == [Propose(encode_claim(NAME, 2, {"replica": 0}))]


def test_an_entry_that_lands_after_a_newer_claim_does_not_count() -> None:
    log = Log()
    t = _primary(log)
    log.before_next = encode_claim(NAME, 2, {"replica": 1})
    with pytest.raises(LockLostError):
        log.run(t, t.append(_records))
    assert t.counted_sent_at == 0.0  # the claim's: the entry never counted


def test_a_standby_claims_nothing_past_a_newer_epoch_or_while_the_holder_speaks() -> None:
    log = Log()
    primary = _primary(log)
    standby = log.tenure()
    log.run(standby, standby.claim({"replica": 1}, after=0), taken := [])
    assert taken == [CatchUp()] and standby.held is None  # epoch 1 came first
    log.clock = 0.4
    log.run(primary, primary.append(lambda e: encode_heartbeat(NAME, e)))
    log.clock = 1.5  # the standby reads the heartbeat now: the holder spoke
    taken = []
    assert log.run(standby, standby.claim({"replica": 1}, after=1, if_silent=True),
                   taken) is False
    assert taken == [CatchUp()]
    log.clock = 3.0  # silent past the lease: the claim goes out and wins epoch 2
    assert log.run(standby, standby.claim({"replica": 1}, after=1, if_silent=True)) is True
    assert standby.held == 2


def test_a_stall_of_the_cluster_restarts_the_silence_from_its_answer() -> None:
    log = Log()
    _primary(log)
    standby = log.tenure()
    log.clock = 2.0
    standby.read(asked=0.5, events=[])  # a read that waited 1.5 s: the reader was blind
    assert standby.silent_for() == 0.0
    assert standby.silence.stalled_for == 1.5


def _go_on(steps: Steps, first: Any) -> Steps:
    """``steps``, already started and at step ``first``, taken on from there."""
    answer = yield first
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as done:
            return done.value
        answer = yield step


def test_two_appends_that_both_look_renew_once_and_neither_fails() -> None:
    """The heartbeat and the committer append side by side; past half a lease both look
    first. The one that renews claims epoch 2; the other, reading that renewal (its own
    store's), writes in epoch 2 with no claim of its own. (It raised "epoch 1 not renewed",
    and the primary resigned, on a busy machine.)"""
    log = Log()
    t = _primary(log)
    log.run(t, t.append(_records))
    log.clock = 0.6  # past half the lease since the last entry that counted
    a = t.append(_records)
    first = a.send(None)
    assert first == CatchUp()  # a looks, and waits for its read
    log.run(t, t.append(lambda e: encode_heartbeat(NAME, e, False)))  # b renews meanwhile
    assert t.held == 2
    taken: list[Any] = []
    index = log.run(t, _go_on(a, first), taken)
    assert taken == [CatchUp(), Propose(_records(2)), CatchUp(index)]
    assert t.held == 2 and t.view.epoch == 2


def test_an_entry_its_own_stores_renewal_landed_before_is_sent_again_in_the_new_epoch(
        ) -> None:
    """The committer sends within half a lease; its entry lands late (its client retried
    after losing the leader), after the heartbeat beside it renewed the epoch. Every
    reader skips that entry: the append sends it again, in epoch 2, and counts that one.
    (It counted the skipped one: records acknowledged and lost, found by the simulation.)"""
    log = Log()
    t = _primary(log)
    log.clock = 0.4
    a = t.append(_records)
    sent = a.send(None)
    assert sent == Propose(_records(1))  # within half a lease: no look
    log.clock = 0.6
    log.run(t, t.append(lambda e: encode_heartbeat(NAME, e, False)))  # b renews meanwhile
    assert t.held == 2
    _, late = log.add(sent.data)  # a's entry lands after the renewal
    taken: list[Any] = []
    index = log.run(t, _go_on(a, a.send((b"", late))), taken)
    assert taken == [CatchUp(late), Propose(_records(2)), CatchUp(index)]
    view = log.tenure().view
    kinds = [type(ev).__name__ for i, (reqid, data) in enumerate(log.entries)
             for ev in view.apply(i + 1, reqid, data)]
    assert kinds[late - 1] == "Fenced" and kinds[index - 1] == "Records"
