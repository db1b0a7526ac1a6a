"""A replica set's live upgrade, and the standby's look at the registration before it
takes over, as steps with no I/O: what ``shared_dir.SharedDirReplica`` runs over the
directories once its claim of the next epoch won, and what the simulator's replicas run
over their simulated disks, one step at a time, with crashes, pauses past the lease and
other replicas' claims free to come between any two.

The upgrader, holding the old version's newest epoch,

1. seals the old version's newest log and delivers everything up to the seal
   (``takeover.seal_and_finish``): log ``n`` is the first the new version writes;
2. asks its binding for ``UpgradeTakeCheckpoint``: the old state, converted;
3. claims the next epoch in the new version's directory (that fences any other upgrader
   there), and only then reads the registration: if it names the new version already,
   the upgrade committed without this replica, which stops;
4. removes what an attempt killed before its commit left there (logs, seals,
   checkpoints, temporary files): nothing in that directory counts until the
   registration names its version, so a stale log ``n`` never refuses this attempt and
   no replay chains a stale checkpoint to this attempt's logs;
5. opens log ``n`` there, and writes checkpoint ``n`` there durably;
6. looks once more that it holds both epochs (a pause past the lease lets a standby take
   over the old version, or another upgrader clear this attempt);
7. commits by writing the registration, which names the new version from then on;
8. marks the old directory upgraded (its remaining replicas exit), and goes live.

The registration is the commit, and the mark comes after it: an upgrader killed between
the two leaves no mark, so a standby of the old version reads the registration once its
claim won and stops if it names a newer version (``standby_takes_over``). The epoch the
standby claims past ended first (its holder gone), after that holder wrote the
registration, so the read sees the write.

Still open (the simulation finds it when it may pause the upgrader there): an upgrader
paused past the lease between its last look at both epochs (step 6) and its write of
the registration (step 7) lets a standby claim, read the registration before that write
and take over with the old version, and each version then has a primary. Nothing orders
the registration's write after the old directory's epochs; a commit made by an
exclusive claim in the old directory would.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import attrs

from ..errors import LockLostError, VersionSupersededError
from .takeover import TakeoverStep, seal_and_finish, take_over

__all__ = ["CheckEpochs", "CheckOldEpoch", "ClaimNewEpoch", "Commit", "GoLiveUpgraded",
           "MarkUpgraded", "OpenNewLog", "ReadRegistration", "RemoveUncommitted",
           "SaveNewCheckpoint", "TakeUpgradeCheckpoint", "UpgradeStep", "check_version",
           "standby_takes_over", "upgrade_replica"]


@attrs.frozen
class ReadRegistration:
    """Answer the version the instance's registration names now."""


@attrs.frozen
class TakeUpgradeCheckpoint:
    """Ask the binding for ``UpgradeTakeCheckpoint`` (the state at the start of log
    ``n``, converted to the new version) and wait for all of it."""

    n: int


@attrs.frozen
class CheckOldEpoch:
    """Raise ``LockLostError`` if a newer epoch was claimed in the old directory."""


@attrs.frozen
class ClaimNewEpoch:
    """Claim the next epoch in the new version's directory (made if need be); answer
    whether the claim won."""


@attrs.frozen
class RemoveUncommitted:
    """Remove the logs, seals and checkpoints killed attempts left in the new
    version's directory (``logstore.remove_uncommitted_version``)."""


@attrs.frozen
class OpenNewLog:
    """Open log ``n`` in the new version's directory to write (fenced there)."""

    n: int


@attrs.frozen
class SaveNewCheckpoint:
    """Write the binding's upgrade checkpoint as checkpoint ``n`` of the new version's
    directory, durably."""

    n: int


@attrs.frozen
class CheckEpochs:
    """Raise ``LockLostError`` if a newer epoch was claimed in either directory."""


@attrs.frozen
class Commit:
    """Write the registration: the instance runs ``version`` from now on; the replica
    writes only in its directory."""

    version: int


@attrs.frozen
class MarkUpgraded:
    """Mark the old directory upgraded to ``version``: its replicas exit."""

    version: int


@attrs.frozen
class GoLiveUpgraded:
    """Go live as the primary of the new version, writing log ``n``."""

    n: int


UpgradeStep = (TakeoverStep | ReadRegistration | TakeUpgradeCheckpoint | CheckOldEpoch
               | ClaimNewEpoch | RemoveUncommitted | OpenNewLog | SaveNewCheckpoint
               | CheckEpochs | Commit | MarkUpgraded | GoLiveUpgraded)


def check_version(registered: int, running: int, role: str) -> None:
    """Stop, having written nothing, if the registration names a newer version than the
    one this replica runs.

    Raises:
        VersionSupersededError: the instance runs a newer version now.
    """
    if registered > running:
        raise VersionSupersededError(
            f"the registration names version {registered} now; this {role} of version "
            f"{running} stops (start replicas of version {registered})")


def standby_takes_over(following: bool, running: int) -> Generator[UpgradeStep, Any, None]:
    """A standby's takeover once its claim won: the registration first (a live upgrade
    may have committed and died before its mark), then ``takeover.take_over``."""
    check_version((yield ReadRegistration()), running, "standby")
    yield from take_over(following)


def upgrade_replica(running: int, to: int) -> Generator[UpgradeStep, Any, None]:
    """The steps of a live upgrade from version ``running`` to ``to`` by a replica whose
    claim of the old directory's next epoch won.

    Raises:
        LockLostError: another replica claimed an epoch this upgrade needs.
        VersionSupersededError: the registration names ``to`` already.
    """
    n = yield from seal_and_finish()
    yield TakeUpgradeCheckpoint(n)
    yield CheckOldEpoch()
    if not (yield ClaimNewEpoch()):
        raise LockLostError(f"another replica is writing version {to}")
    check_version((yield ReadRegistration()), running, "upgrader")
    yield RemoveUncommitted()
    yield OpenNewLog(n)
    yield SaveNewCheckpoint(n)
    yield CheckEpochs()
    yield Commit(to)
    yield MarkUpgraded(to)
    yield GoLiveUpgraded(n)
