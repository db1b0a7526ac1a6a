"""The coordinator's public face for the binding's test helpers.

``ambrosia_py.testing`` replays recorded runs through ``ambrosia debug-instance``; it needs
to know which checkpoints an instance keeps and to start debug-instance as a process. This
module is all of this package it may import (an import-linter contract says so): the
registry's and the log directory's layout stay private to the coordinator.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from . import launch, registry
from .logstore import CHECKPOINT_PREFIX, file_numbers

__all__ = ["current_version", "kept_checkpoints", "kept_checkpoints_by_version",
           "start_debug_instance"]

Home = str | os.PathLike[str] | None


def current_version(name: str, home: Home = None) -> int:
    """The version ``name`` is registered to run now.

    Raises:
        RegistryError: ``name`` is not registered, or its registration is damaged.
    """
    return registry.load(name, home).current_version


def kept_checkpoints(name: str, home: Home = None, version: int | None = None) -> list[int]:
    """The numbers of the checkpoints kept for ``name`` (of ``version``, default the
    current one), oldest first.

    Raises:
        RegistryError: ``name`` is not registered, or its registration is damaged.
    """
    reg = registry.load(name, home)
    return file_numbers(registry.instance_dir(reg, version), CHECKPOINT_PREFIX)


def kept_checkpoints_by_version(name: str, home: Home = None) -> dict[int, list[int]]:
    """Every version of ``name`` whose directory keeps a checkpoint, with their numbers.

    Raises:
        RegistryError: ``name`` is not registered, or its registration is damaged.
    """
    reg = registry.load(name, home)
    found: dict[int, list[int]] = {}
    root = Path(reg.log_dir)
    if not root.is_dir():
        return found
    prefix = f"{name}_"
    for d in root.iterdir():
        rest = d.name[len(prefix):]
        if d.name.startswith(prefix) and rest.isdigit():  # registry.instance_dir's names
            kept = file_numbers(d, CHECKPOINT_PREFIX)
            if kept:
                found[int(rest)] = kept
    return found


def start_debug_instance(name: str, checkpoint: int, *, receive_port: int, send_port: int,
                         idle_timeout: float, testing_upgrade: bool = False,
                         version: int | None = None, home: Home = None, stderr: Any = None,
                         timeout: float = 90.0) -> subprocess.Popen[str]:
    """Start ``ambrosia debug-instance`` replaying checkpoint ``checkpoint`` of ``name`` to
    a binding that connects to ``receive_port``/``send_port``; returns once it listens.
    Its summary is one JSON line on its stdout when it ends (``--json``).

    Args:
        idle_timeout: end this many seconds after the replay, once the binding is quiet.
        testing_upgrade: the binding upgrades right after loading the checkpoint.
        version: which version's files (default: the registered current version).
        stderr: where its stderr goes (as for ``launch.start_process``).

    Raises:
        CoordinatorError: it could not start; the message is its own one-line reason.
    """
    args = ["debug-instance", "-i", name, "-c", str(checkpoint), "-rp", str(receive_port),
            "-sp", str(send_port), "--json", "--idle-timeout", str(idle_timeout)]
    if testing_upgrade:
        args.append("--testing-upgrade")
    if version is not None:
        args += ["-cv", str(version)]
    return launch.start_process(args, home=home, stderr=stderr, timeout=timeout)
