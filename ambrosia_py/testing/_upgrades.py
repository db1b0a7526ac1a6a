"""Upgrade tests of an instance that was already upgraded live.

A live upgrade from registered version N to M leaves version N's files as they were and
starts version M's directory with a checkpoint numbered right after N's last log (numbers
and sequence ids go on across versions), holding the converted state. An upgrade test of
VCurrent -> VNext therefore replays, as one history:

1. version N's checkpoint with VCurrent, converted to VNext, and N's logs with VNext
   (the classic upgrade test: VNext must replay what VCurrent recorded);
2. version M's files from its first kept checkpoint with VNext (a plain repro).

A checkpoint number names its version: the number alone says which directory holds it.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
from ambrosia_ic import api as coordinator

from ambrosia_py.errors import AlreadyUpgradedError

__all__ = ["UpgradeHistory", "combine", "history", "version_of_checkpoint"]


@attrs.frozen
class UpgradeHistory:
    """Where a finished live upgrade left its files.

    Attributes:
        old_version: N, the registered version before the upgrade.
        old_checkpoint: the checkpoint of N to convert.
        new_version: M, the version after it.
        new_checkpoint: M's first kept checkpoint.
    """

    old_version: int
    old_checkpoint: int
    new_version: int
    new_checkpoint: int


def current_version(name: str, home: str | os.PathLike[str] | None) -> int:
    return coordinator.current_version(name, home)


def version_of_checkpoint(name: str, checkpoint: int,
                          home: str | os.PathLike[str] | None) -> int | None:
    """The registered version whose directory keeps checkpoint ``checkpoint``."""
    for version, kept in coordinator.kept_checkpoints_by_version(name, home).items():
        if checkpoint in kept:
            return version
    return None


def history(name: str, old_version: int | None, old_checkpoint: int | None,
            home: str | os.PathLike[str] | None, *, newest: bool = False) -> UpgradeHistory:
    """The two parts of an upgrade test that spans a finished live upgrade.

    Args:
        old_version: N, or None for the newest version before the current one.
        old_checkpoint: the checkpoint of N to start from, or None for N's oldest kept
            (its newest with ``newest``).

    Raises:
        AlreadyUpgradedError: no earlier version's files are kept, so there is nothing
            the old code recorded left to replay.
    """
    by_version = coordinator.kept_checkpoints_by_version(name, home)
    current = current_version(name, home)
    if old_version is None:
        older = [v for v in by_version if v < current]
        if not older:
            raise AlreadyUpgradedError(
                f"{name} was upgraded live to version {current} and no earlier version's "
                f"files are kept: nothing recorded by the old code is left to upgrade-test; "
                f"replay version {current} with repro({name!r}, <the new class>)")
        old_version = max(older)
    newer = sorted(v for v in by_version if v > old_version)
    if not newer:  # pragma: no cover - only reached after a finished upgrade
        raise AlreadyUpgradedError(f"{name} has no version after {old_version} to replay")
    first = old_checkpoint
    if first is None:
        first = by_version[old_version][-1 if newest else 0]
    return UpgradeHistory(old_version, first, newer[0], by_version[newer[0]][0])


def combine(first: Any, second: Any) -> Any:
    """One ReplayResult for both parts: the final state, every output in order."""
    status = "ok" if first.status == second.status == "ok" else "unchecked"
    return attrs.evolve(second, outputs=[*first.outputs, *second.outputs],
                        records_replayed=first.records_replayed + second.records_replayed,
                        status=status)
