"""The Raft store's and replica's rules (``logstore.raft_rules``), each at its edges:
when a primary must look before it writes, when and how a following standby claims, how
long it waits, which epoch is superseded, and how a stall restarts the silence. The
simulation's Raft runs drive the same functions and find a mutant of each of the first
three."""

from __future__ import annotations

import math

import pytest
from ambrosia_ic.logstore.raft_rules import (
    Silence,
    may_claim,
    must_look,
    standby_claim,
    standby_wait,
    superseded,
)

LEASE = 1.0


@pytest.mark.parametrize(("since", "look"), [(0.0, False), (0.5, False), (0.5001, True),
                                             (3.0, True)])
def test_a_primary_looks_before_it_writes_only_past_half_a_lease(since: float,
                                                                 look: bool) -> None:
    assert must_look(10.0 + since, 10.0, LEASE) is look


def test_a_standby_claims_an_instance_nobody_holds_at_once() -> None:
    assert standby_claim(0, 0.0, LEASE) == (0, False)


@pytest.mark.parametrize(("silent", "ended", "move"), [
    (0.3, False, None),
    (1.0, False, None),  # exactly the lease: not past it
    (1.01, False, (4, True)),  # past the lease: claim, the silence checked again
    (0.3, True, (4, False)),  # the holder's process is gone: claim, no second look
    (math.inf, False, (4, True)),  # the holder resigned
])
def test_a_following_standby_claims_past_the_lease_or_when_the_holder_is_gone(
        silent: float, ended: bool, move: tuple[int, bool] | None) -> None:
    assert standby_claim(4, silent, LEASE, ended=ended) == move
    assert may_claim(silent, LEASE, ended=ended) is (move is not None)


@pytest.mark.parametrize(("silent", "wait"), [(0.0, 0.05), (0.97, 0.03), (1.5, 0.002),
                                              (math.inf, 0.002)])
def test_a_standby_waits_no_longer_than_the_lease_has_left(silent: float,
                                                           wait: float) -> None:
    assert standby_wait(silent, LEASE, 0.05) == pytest.approx(wait)


@pytest.mark.parametrize(("held", "epoch", "fenced"), [(None, 0, True), (None, 3, True),
                                                       (3, 3, False), (3, 4, True)])
def test_a_store_writes_only_while_it_holds_the_newest_epoch(held: int | None, epoch: int,
                                                             fenced: bool) -> None:
    assert superseded(held, epoch) is fenced


def test_a_read_that_waited_past_a_quarter_lease_restarts_the_silence_from_its_answer(
        ) -> None:
    s = Silence(0.0, LEASE, rediscovery=0.3)
    s.read(1.0, 1.2)  # quick: nothing changes
    assert s.silent_for(2.0, resigned=False) == 2.0 and s.stalled_for == 0.0
    s.read(2.0, 4.0)  # blind two seconds: the primary's lease counts from the answer
    assert s.silent_for(4.5, resigned=False) == pytest.approx(0.2)
    assert s.stalled_for == 2.0
    s.saw_epoch(5.0)
    assert s.silent_for(5.5, resigned=False) == 0.5
    assert s.silent_for(5.5, resigned=True) == math.inf
