"""Starting an instance afresh on purpose: the ``--start-afresh`` option, which ``ambrosia
ic`` and ``ambrosia run`` share, and the refusal of an instance that has started before
but whose log directory holds nothing to recover from.

The refusal is made here, by the command, before anything is written (the coordinator
would first create the directory and its lock file), and it names the command in use:
``ambrosia run`` for an immortal of this binding, ``ambrosia ic`` for a coordinator run
beside a binding of another language. The coordinator keeps its own check at start-up,
under the log's lock, for a directory emptied in between.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ambrosia_core.errors import CoordinatorError

from .. import registry

__all__ = ["START_AFRESH_HELP", "add_start_afresh", "prepare_start"]

START_AFRESH_HELP = (
    "forget that the instance ever started, so that an empty log directory is a first "
    "start (its earlier history is not recovered); without it, an instance that has "
    "started refuses to start afresh")


def add_start_afresh(p: argparse.ArgumentParser) -> None:
    """The option, with the same help wherever it is."""
    p.add_argument("--start-afresh", action="store_true", help=START_AFRESH_HELP)


def prepare_start(reg: registry.Registration, home: Path, *, afresh: bool, command: str,
                  warn: Callable[[str], None]) -> None:
    """What ``--start-afresh`` does, or without it the refusal of an instance whose
    history has gone astray; nothing else is written.

    Args:
        command: the command that starts the instance again, as the user would type it
            (``ambrosia ic -i NAME``): the refusal says to add ``--start-afresh`` to it.
        warn: says, in one line, that the instance was told to start afresh.

    Raises:
        CoordinatorError: the instance has started before and its log directory holds no
            log to recover from (or what the coordinator would refuse in that directory:
            logs without a checkpoint, a damaged first start).
    """
    from ..recovery import first_start_pending  # the log's readers: only a start needs them

    name, d = reg.instance_name, registry.instance_dir(reg)
    if afresh:
        if registry.start_afresh(name, home):
            warn(f"--start-afresh: {name} starts afresh if its log directory {d} holds no "
                 "log")
        return
    if reg.active_active or not registry.has_started(name, home):
        return  # replicas share one log and decide at their epoch claim
    if d.is_dir() and not first_start_pending(d, reg.committer_id):
        return
    # Its history is somewhere else (a home copied or moved with its registration naming
    # the old directory, a directory removed or emptied): starting afresh would apply
    # everything again under numbers that were used.
    raise CoordinatorError(
        f"{name} has started before, but its log directory {d} holds no log to recover "
        "from (moved, removed or emptied?); register it again with the directory that "
        f"holds its log (ambrosia register-instance -i {name} -l DIR), or start it afresh "
        f"on purpose with {command} --start-afresh")
