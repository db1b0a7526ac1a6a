"""A standby's takeover of a shared directory, as steps with no I/O: what
``shared_dir.Replica`` runs over the directory once its claim of the next epoch won, and
what the simulator's replicas run over their simulated disk, one step at a time, with
anything else (the old primary's writes landing, crashes) free to come between two.

After the claim, the new primary

1. follows from the newest intact checkpoint if it follows nothing yet (the first start
   may have finished meanwhile), and makes the first start itself if there is still none;
2. otherwise seals the newest log where its whole records end, unless it is sealed
   already (an earlier takeover's seal counts: what it delivered stays delivered), so
   that whatever the old primary lands there later is read by nobody, its writer
   included (``FencedSink`` looks for a newer epoch before it delivers);
3. delivers every record of the log up to the seal;
4. opens the next log (fenced: refused if it exists or a newer epoch was claimed), and
   goes live from the sequence id after the last record delivered.

The live upgrade's replica seals and finishes the same way (``seal_and_finish``) before it
checkpoints into the new version's directory.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import attrs

__all__ = ["FirstStart", "FollowTo", "GoLive", "LoadCheckpoint", "NewestLog", "OpenLog",
           "ReadSeal", "TakeoverStep", "WholeEnd", "WriteSeal", "seal_and_finish",
           "take_over"]


@attrs.frozen
class LoadCheckpoint:
    """Follow from the newest intact checkpoint, if there is one; answer whether the
    replica now follows the log."""


@attrs.frozen
class FirstStart:
    """No checkpoint: make the first start, and go live."""


@attrs.frozen
class NewestLog:
    """Answer the number of the newest log in the directory."""


@attrs.frozen
class ReadSeal:
    """Answer where log ``n``'s seal says it ends for good (None: it has no seal)."""

    n: int


@attrs.frozen
class WholeEnd:
    """Answer where log ``n``'s whole records end (a torn tail is not part of it)."""

    n: int


@attrs.frozen
class WriteSeal:
    """Seal log ``n`` at ``end``, durably."""

    n: int
    end: int


@attrs.frozen
class FollowTo:
    """Deliver every record of the logs up to log ``n``'s offset ``end``."""

    n: int
    end: int


@attrs.frozen
class OpenLog:
    """Open log ``n`` to write (the fenced sink's ``next_log``)."""

    n: int


@attrs.frozen
class GoLive:
    """Become the primary, writing log ``n``, and go live."""

    n: int


TakeoverStep = (LoadCheckpoint | FirstStart | NewestLog | ReadSeal | WholeEnd | WriteSeal
                | FollowTo | OpenLog | GoLive)


def seal_and_finish() -> Generator[TakeoverStep, Any, int]:
    """Seal the newest log (unless sealed) and deliver everything up to the seal; the
    number of the next log."""
    n = yield NewestLog()
    end = yield ReadSeal(n)
    if end is None:
        end = yield WholeEnd(n)
        yield WriteSeal(n, end)
    yield FollowTo(n, end)
    return int(n) + 1


def take_over(following: bool) -> Generator[TakeoverStep, Any, None]:
    """The steps of a takeover by a replica whose claim won (``following``: it follows
    the log from a checkpoint already)."""
    if not following:
        following = yield LoadCheckpoint()
    if not following:
        yield FirstStart()
        return
    n = yield from seal_and_finish()
    yield OpenLog(n)
    yield GoLive(n)
