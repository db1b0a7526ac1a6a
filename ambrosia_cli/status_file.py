"""Where an instance's status file is and what it says: read the same way by the text
command (``ambrosia_cli.status``) and by the status page (``ambrosia_cli.status_page``).

``ambrosia run`` records where, under the registry home, an instance writes its status
(its configuration's ``status_file``), so the file is found by the instance's name alone;
an instance whose configuration names no file may write ``status.json`` in its instance
directory, the place looked at next. Whether the instance still runs is whether a
coordinator holds its log lock.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ambrosia_ic import registry

from ambrosia_core.durable import make_dirs, replace_durably
from ambrosia_core.errors import AmbrosiaError

__all__ = ["DEFAULT_NAME", "StatusError", "find_status_file", "life_state", "load_status",
           "record_status_file"]

#: The file an instance may write in its instance directory when no location is recorded.
DEFAULT_NAME = "status.json"


class StatusError(AmbrosiaError):
    """No status can be shown: the instance is unknown, not running, or reports none."""


def _pointer_path(home: Path, name: str) -> Path:
    return home / "status" / f"{registry.check_instance_name(name)}.json"


def record_status_file(name: str, config: Mapping[str, Any], home: Path) -> Path | None:
    """Remember where ``name`` writes its status (its configuration's ``status_file``, made
    absolute against the current directory, as the instance will open it); returns it, or
    None when the configuration names none (an older record is then removed, so that
    ``status`` does not read a file this run no longer writes)."""
    pointer = _pointer_path(home, name)
    value = config.get("status_file")
    if not isinstance(value, str) or not value:
        pointer.unlink(missing_ok=True)
        return None
    path = Path(os.path.abspath(value))
    make_dirs(pointer.parent)
    replace_durably(pointer, (json.dumps({"status_file": str(path)}) + "\n").encode())
    return path


def find_status_file(reg: registry.Registration, home: Path) -> Path:
    """The status file of ``reg``'s instance: the recorded one, else ``status.json`` in
    its instance directory.

    Raises:
        StatusError: the record is damaged.
    """
    pointer = _pointer_path(home, reg.instance_name)
    try:
        data = json.loads(pointer.read_text())
    except FileNotFoundError:
        return registry.instance_dir(reg) / DEFAULT_NAME
    except (OSError, ValueError) as err:
        raise StatusError(f"cannot read {pointer}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("status_file"), str):
        raise StatusError(f"{pointer}: not a status file record")
    return Path(data["status_file"])


def load_status(name: str, home: Path, path: Path | None = None,
                now: float | None = None) -> tuple[dict[str, Any], float, bool]:
    """The status ``name`` wrote last, its age in seconds, and whether it is running.

    Raises:
        StatusError: unknown instance, no status file, or an unreadable one.
    """
    # The log's readers and the coordinator's starter: `ambrosia run` has them already,
    # and `ambrosia status` is the one other command that needs them.
    from ambrosia_ic.logstore import LOCK_NAME

    from .local_coordinator import lock_held

    try:
        reg = registry.load(name, home)
    except AmbrosiaError as err:
        raise StatusError(str(err)) from None
    if path is None:
        path = find_status_file(reg, home)
    lock = registry.instance_dir(reg) / LOCK_NAME
    running = lock_held(lock)
    try:
        raw = path.read_bytes()
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        if not running:
            raise StatusError(f"{name} is not running (no coordinator holds {lock}) and "
                              f"left no status ({path})") from None
        raise StatusError(f"{name} is running but reports no status: no {path} (set "
                          "status_file in its configuration)") from None
    except OSError as err:
        raise StatusError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        report = json.loads(raw)
    except ValueError as err:
        raise StatusError(f"{path}: not a status report: {err}") from None
    if not isinstance(report, dict):
        raise StatusError(f"{path}: not a status report (expected a JSON object)")
    return report, max(age, 0.0), running


def life_state(report: Mapping[str, Any], running: bool) -> str:
    """How the instance that wrote ``report`` is: "running" (a coordinator holds its
    lock), "stopped" (its last status is marked as written while it stopped), "crashed"
    (unmarked, and its process is gone: kill -9, a crash, a power cut) or "stopping"
    (unmarked, its coordinator gone, its process not yet). A status of an older version,
    with no ``pid``, cannot tell: "stopped"."""
    if running:
        return "running"
    pid = report.get("pid")
    if "stopped" in report or not isinstance(pid, int) or isinstance(pid, bool):
        return "stopped"
    return "stopping" if _alive(pid) else "crashed"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True
