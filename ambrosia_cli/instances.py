"""``ambrosia list`` and ``ambrosia stop -i NAME``: the registered instances, and an
ordinary stop of a running one.

An instance is running while a coordinator holds its log lock (a flock on the lock file
in its instance directory). Linux says which process holds a flock (``/proc/locks``), so
``stop`` needs no pid file that a ``kill -9`` could leave behind: it finds the holder, and
sends SIGTERM to ``ambrosia run`` when the coordinator is its child (the binding and its
coordinator stop together, as a service manager's stop does) or to the coordinator
itself when it runs alone (``ambrosia ic``). Then it waits until the lock is let go.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from ambrosia_ic import registry
from ambrosia_ic.registry.raft_address import without_secret

from ambrosia_core.errors import AmbrosiaError

__all__ = ["STOP_SECONDS", "StopError", "add_list", "add_stop", "describe", "lock_holder",
           "stop_instance"]

# How long `stop` waits after its SIGTERM: `ambrosia run` gives its coordinator 10 s to stop
# and then waits up to 10 s more for it, so an instance still running after 30 s is stuck
# (the refusal says so), not slow.
STOP_SECONDS = 30.0


class StopError(AmbrosiaError):
    """The instance cannot be stopped: unknown, not running, or it did not stop in time."""


def lock_holder(path: Path) -> int | None:
    """The pid of the process holding a flock on ``path``, from ``/proc/locks`` (None
    when nobody holds one, or the system does not say)."""
    try:
        st = os.stat(path)
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 28218 fe:00:2376545 0 EOF" (blocked waiters: "->")
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == dev:
            return int(fields[4])
    return None


def _parent(pid: int) -> tuple[int, str] | None:
    """The parent of ``pid`` and the parent's command line (None when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = int(stat.rpartition(")")[2].split()[1])
        cmdline = Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError, IndexError):
        return None
    return ppid, cmdline


def _is_ambrosia_run(cmdline: str) -> bool:
    words = cmdline.split()
    return "run" in words and any(w.endswith(("ambrosia", "ambrosia_cli")) for w in words)


def describe(name: str, home: Path) -> dict[str, Any]:
    """One instance as ``list`` shows it: running or not, its role, ports and version."""
    from ambrosia_ic.logstore import LOCK_NAME  # the log's readers: not at every start

    from .local_coordinator import lock_held

    reg = registry.load(name, home)
    lock = registry.instance_dir(reg) / LOCK_NAME
    running = lock_held(lock)
    role = ("active/active, log in " + without_secret(reg.log_store)
            if reg.log_store else "active/active" if reg.active_active else "standalone")
    replicas = len(registry.replicas(reg, home)) if reg.active_active else 1
    return {"name": name, "running": running,
            "pid": lock_holder(lock) if running else None, "role": role,
            "replicas": replicas, "version": reg.current_version,
            "receive_port": reg.receive_port, "send_port": reg.send_port,
            "ic_port": reg.ic_port, "log_dir": reg.log_dir}


def _list(args: argparse.Namespace) -> int:
    home = registry.ambrosia_home(args.home)
    rows = [describe(name, home) for name in registry.find_instances(home)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no instances registered in {home}")
        return 0
    head = ("name", "state", "role", "version", "ports (receive send ic)", "pid")
    table = [head] + [(r["name"], "running" if r["running"] else "stopped", r["role"]
                       + (f" ({r['replicas']} replicas)" if r["replicas"] > 1 else ""),
                       str(r["version"]),
                       f"{r['receive_port']} {r['send_port']} {r['ic_port']}",
                       "-" if r["pid"] is None else str(r["pid"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def stop_instance(name: str, home: Path, timeout: float = STOP_SECONDS) -> str:
    """Stop ``name`` as SIGTERM does; the line that says what was stopped.

    Raises:
        StopError: unknown, not running, or still running after ``timeout`` seconds.
    """
    from ambrosia_ic.logstore import LOCK_NAME

    from .local_coordinator import lock_held

    try:
        reg = registry.load(name, home)
    except AmbrosiaError as err:
        raise StopError(str(err)) from None
    lock = registry.instance_dir(reg) / LOCK_NAME
    holder = lock_holder(lock) if lock_held(lock) else None
    if holder is None:
        raise StopError(f"{name} is not running (no coordinator holds {lock})")
    parent = _parent(holder)
    target, what = ((parent[0], "ambrosia run") if parent and _is_ambrosia_run(parent[1])
                    else (holder, "its coordinator"))
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(target, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while lock_held(lock):
        if time.monotonic() > deadline:
            raise StopError(f"{name} did not stop within {timeout:g} s of SIGTERM to "
                            f"{what} (pid {target})")
        time.sleep(0.05)
    return f"stopped {name} (SIGTERM to {what}, pid {target})"


def _stop(args: argparse.Namespace) -> int:
    print(stop_instance(args.instance_name, registry.ambrosia_home(args.home)))
    return 0


def add_list(sub: Any) -> None:
    p = sub.add_parser("list", help="the registered instances, running or not, with their "
                       "roles and ports")
    p.add_argument("--json", action="store_true", help="one JSON object per instance")
    p.set_defaults(handler=_list)


def add_stop(sub: Any) -> None:
    p = sub.add_parser("stop", help="stop a running instance as SIGTERM does (the binding "
                       "and the coordinator `ambrosia run` started, or a coordinator alone)")
    p.add_argument("-i", "--instance-name", required=True, help="the instance to stop")
    p.set_defaults(handler=_stop)
