"""The restart policy without I/O: pauses, streaks, and what of a failure is said."""

from __future__ import annotations

import random

from ambrosia_services.kcl.restarts import (
    HELD_MAX_CHARS,
    STABLE_SECONDS,
    Restarts,
    Said,
    restart_retry,
)

from ambrosia_core.retry import Attempts

REASON = "the processor exited (code 1) during processRecords"


def restarts() -> Restarts:
    return Restarts(Attempts(restart_retry(1.0), rng=random.Random(7)))


def test_a_child_that_dies_soon_keeps_doubling_its_pause_and_is_said_once_then_counted(
        ) -> None:
    r = restarts()
    now, said, pauses = 0.0, [], []
    for _ in range(12):
        r.started(now)
        now += STABLE_SECONDS - 0.01  # up a long time, but not long enough
        assert r.check_up(now) == []
        fail = r.failed(now, 1000.0 + now, REASON)
        said.append(fail.said)
        pauses.append(fail.pause)
        assert fail.since == 1000.0 + STABLE_SECONDS - 0.01  # the streak's first
        now += fail.pause
    assert said == [Said.FULL, Said.AGAIN, *[Said.COUNTED] * 7, Said.AGAIN, Said.COUNTED,
                    Said.COUNTED]
    full = [min(1.0, 0.1 * 2 ** k) for k in range(12)]
    assert all(f / 2 <= p <= f for f, p in zip(full, pauses, strict=True)), pauses
    assert (r.failures, r.last_failure) == (12, REASON)


def test_a_child_that_stayed_up_starts_a_new_streak() -> None:
    r = restarts()
    for _ in range(4):
        r.started(0.0)
        r.failed(0.5, 0.0, REASON)
    r.started(10.0)
    fail = r.failed(10.0 + STABLE_SECONDS, 2.0, REASON)
    assert (fail.count, fail.said, fail.since) == (1, Said.FULL, 2.0)
    assert fail.pause <= 0.1


def test_a_restarted_childs_stderr_is_held_until_it_fails_again_stays_up_or_ends() -> None:
    r = restarts()
    r.started(0.0)
    assert r.stderr("first life") == ["first life"]  # not in a streak: said as it comes
    assert r.failed(1.0, 0.0, REASON).stderr == ()
    r.started(2.0)
    assert r.stderr("Traceback") == [] and r.holding
    assert r.failed(2.5, 0.0, REASON).stderr == ()  # the same again: given up
    r.started(3.0)
    assert r.stderr("another") == []
    fail = r.failed(3.5, 0.0, "no answer to processRecords in 60 s; killed")
    assert (fail.said, fail.stderr) == (Said.FULL, ("another",))  # a new reason: all of it
    r.started(4.0)
    assert r.stderr("working") == []
    assert r.check_up(4.0 + STABLE_SECONDS - 0.01) == []
    assert r.check_up(4.0 + STABLE_SECONDS) == ["working"]  # it stayed up: the streak ends
    assert (r.failures, r.holding) == (0, False)
    assert r.stderr("more") == ["more"]
    r.failed(20.0, 0.0, REASON)
    r.started(21.0)
    r.stderr("last words")
    assert r.ended() == ["last words"] and r.failures == 0


def test_held_stderr_has_a_bound() -> None:
    r = restarts()
    r.started(0.0)
    r.failed(0.1, 0.0, REASON)
    r.started(1.0)
    chunk = "x" * (HELD_MAX_CHARS // 2)
    assert r.stderr(chunk) == [] and r.stderr(chunk) == []
    assert r.stderr("y") == [chunk, chunk, "y"] and not r.holding
    assert r.stderr("z") == ["z"]
