"""A Raft replica's roles as steps (``replication.raft_roles``), taken here by hand: the
exact steps each situation asks for, in order. ``RaftReplica`` takes them over a real
cluster (``tests/raft``), the simulation's Raft-backed replicas over a simulated one
(``tests/sim/raftstore``)."""

from __future__ import annotations

from typing import Any

import pytest
from ambrosia_ic.errors import LogCorruptionError
from ambrosia_ic.logstore import DiskRecord
from ambrosia_ic.logstore.raft_entries import CheckpointEnd
from ambrosia_ic.replication import raft_roles as roles

LEASE = 1.0
END = CheckpointEnd(index=3, number=0, parts=(2,), size=10, check=0)


def _rec(seq: int) -> DiskRecord:
    return DiskRecord(seq, 0, 0, b"r%d" % seq, {}, 1)


def _looked(epoch: int = 1, records: tuple[int, ...] = (), count: int = 1,
            newest: CheckpointEnd | None = END, silent: float = 0.0, ended: bool = False,
            primary: int | None = 0) -> roles.Looked:
    return roles.Looked(epoch, primary, count, newest, tuple(_rec(s) for s in records),
                        silent, ended)


class Run:
    """The roles' steps, answered one at a time."""

    def __init__(self, number: int = 1, every: int = 3) -> None:
        self.roles = roles.RaftRoles(number, LEASE, every)
        self.steps = self.roles.run()
        self.step: Any = next(self.steps)

    def answer(self, value: Any = None) -> Any:
        self.step = self.steps.send(value)
        return self.step


def test_the_first_claim_of_an_instance_makes_the_first_start() -> None:
    r = Run()
    assert r.step == roles.Look()
    assert r.answer(_looked(epoch=0, count=0, newest=None)) == roles.Claim(0, False)
    assert r.answer(True) == roles.FirstStart()
    with pytest.raises(StopIteration):
        r.answer()


def test_a_standby_keeps_what_it_reads_until_a_checkpoint_and_a_record_then_delivers_from_it(
        ) -> None:
    r = Run()
    # The first start's checkpoint 0, no record yet: it may be made again; not loaded.
    assert r.answer(_looked(count=0)) == roles.Standby()
    assert r.answer() == roles.Wait(0.05)
    assert r.answer() == roles.Look()
    assert r.answer(_looked(count=0)) == roles.Wait(0.05)
    r.answer()
    assert r.answer(_looked(records=(0, 1), count=2)) == roles.LoadCheckpoint(END)
    assert r.answer(0) == roles.Deliver((_rec(0), _rec(1)))
    assert r.answer() == roles.Wait(0.05)
    r.answer()
    # Read twice, or before the checkpoint: skipped; then in order.
    assert r.answer(_looked(records=(1, 2, 3), count=4)) == roles.Deliver((_rec(2), _rec(3)))
    r.answer()
    assert r.roles.next_seq == 4  # once delivered


def test_a_standby_refuses_a_record_that_skips_a_sequence_id() -> None:
    r = Run()
    r.answer(_looked(epoch=1, records=(0,)))
    r.answer()  # Standby
    assert r.step == roles.LoadCheckpoint(END)
    r.answer(0)
    r.answer()
    r.answer()
    with pytest.raises(LogCorruptionError, match="record 2 where 1 was due"):
        r.answer(_looked(records=(2,), count=3))


def test_a_takeover_reads_up_to_its_claim_then_opens_the_next_log_and_goes_live() -> None:
    r = Run()
    r.answer(_looked(records=(0,)))
    r.answer()
    r.answer(0)  # loaded, record 0 delivered
    assert r.step == roles.Deliver((_rec(0),))
    assert r.answer() == roles.Wait(0.05)
    r.answer()
    silent = _looked(silent=1.5, count=1)
    assert r.answer(silent) == roles.Claim(1, True)
    assert r.answer(True) == roles.Look()  # what its claim's read brought
    assert r.answer(_looked(epoch=2, records=(1, 2), count=3)) == roles.TakingOver(
        "the primary was silent 1.500 s (lease 1 s)")
    assert r.answer() == roles.Deliver((_rec(1), _rec(2)))
    assert r.answer() == roles.OpenLog()
    assert r.answer() == roles.GoLive()
    with pytest.raises(StopIteration):
        r.answer()


def test_a_claim_won_over_a_log_with_no_record_makes_the_first_start_still_owed() -> None:
    r = Run()
    r.answer(_looked(count=0))
    assert r.answer() == roles.Wait(0.05)
    r.answer()
    assert r.answer(_looked(count=0, ended=True)) == roles.Claim(1, False)
    r.answer(True)
    assert r.answer(_looked(epoch=2, count=0)) == roles.FirstStart()


def test_the_checkpointing_secondary_takes_its_turn_by_rank() -> None:
    """Replica 1 beside primary 0 is the secondary (rank 0): a checkpoint every 3
    records, numbered by the sequence id its state starts at; replica 2 (rank 1) only
    after 6."""
    assert roles.rank(1, 0) == 0 and roles.rank(2, 0) == 1 and roles.rank(2, 1) == 1
    assert not roles.turn(2, 0, 5, 0, 3) and roles.turn(2, 0, 6, 0, 3)
    r = Run(number=1)
    r.answer(_looked(records=(0,)))
    r.answer()
    r.answer(0)
    r.answer()  # Deliver 0
    r.answer()  # Wait
    assert r.answer(_looked(records=(1, 2), count=3)) == roles.Deliver((_rec(1), _rec(2)))
    assert r.answer() == roles.Checkpoint(3)
    assert r.answer() == roles.Wait(0.05)
    r.answer()
    assert r.answer(_looked(records=(3,), count=4)) == roles.Deliver((_rec(3),))
    assert r.answer() == roles.Wait(0.05)  # 1 record since checkpoint 3: not its turn
