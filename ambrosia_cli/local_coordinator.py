"""The coordinator ``ambrosia run`` starts beside the immortal: registration on first use,
start-up (with its one wait), and the stop.

The command package is the one place that knows both the binding and this project's
coordinator; the binding itself only ever sees two ports.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ambrosia_ic import launch, logstore, recovery, registry
from ambrosia_ic.errors import RegistryError
from ambrosia_ic.launch import STOPPED_PREFIX
from ambrosia_ic.logstore import LOCK_NAME

from ambrosia_core.errors import AmbrosiaError, CoordinatorError
from ambrosia_core.processes import exit_status, stop_process

__all__ = ["ensure_registered", "held_class", "how_it_ended", "lock_held", "port_taken",
           "register_upgrade", "registered", "replay_estimate", "start", "start_new", "stop",
           "was_stopped"]

# How many port draws a new instance's first start makes (see ``start_new``).
FIRST_START_TRIES = 3
# How long a start waits for the previous run's coordinator to let go of the log lock.
LOCK_WAIT_SECONDS = 5.0
# Enough of a checkpoint's binding bytes to hold their header (its first object).
_HEADER_BYTES = 4096


def registered(name: str, home: Path) -> registry.Registration | None:
    """The registration of ``name``, or None if it has none (nothing is written).

    Raises:
        RegistryError: its registration file is there but cannot be used.
    """
    if not registry.registration_exists(name, home):
        return None
    return registry.load(name, home)


def held_class(reg: registry.Registration) -> tuple[str, int] | None:
    """The class name and version that the checkpoint the instance will recover from
    holds (its newest intact one); None when it will not recover (no checkpoint, or only
    an interrupted first start's, which is started again afresh), or when the checkpoint
    cannot be read (its recovery then says why). Only read."""
    # The binding's runtime: `ambrosia run` has it, and list, stop and status (which
    # probe the lock here) need none of it.
    from ambrosia_py.runtime.checkpoint import read_header

    if reg.active_active:
        return None  # the replicas' log decides which checkpoint, at the epoch claim
    d = registry.instance_dir(reg)
    try:
        if not d.is_dir() or recovery.first_start_pending(d, reg.committer_id):
            return None
        found = recovery.newest_intact_checkpoint(d)
        if found is None:
            return None
        cf = found[1]  # the binding's bytes: ``size`` of them at ``raw_offset``
        with open(cf.path, "rb") as f:
            f.seek(cf.raw_offset)
            first = f.read(min(cf.size, _HEADER_BYTES))
    except (AmbrosiaError, OSError):
        return None
    return read_header(first)


def ensure_registered(name: str, home: Path, log: logging.Logger,
                      version: int = 0) -> tuple[registry.Registration, bool]:
    """The registration of ``name``, and whether it was registered just now (free ports no
    other registration holds, logs under ``home/logs``, current version ``version``: the
    class's, so that the registry and the classes count versions alike)."""
    try:
        return registry.load(name, home), False
    except RegistryError:
        if (home / "instances" / f"{name}.json").exists():
            raise
    rp, sp, icp = registry.unregistered_free_ports(3, home)
    reg = registry.register(instance_name=name, receive_port=rp, send_port=sp, ic_port=icp,
                            log_dir=str(home / "logs"), current_version=version, home=home)
    log.info("registered %s (receive port %d, send port %d, logs in %s)", name, rp, sp,
             home / "logs")
    return reg, True


def start_new(reg: registry.Registration, home: Path, log: logging.Logger,
              stopping: Callable[[], bool] = lambda: False, options: Sequence[str] = ()
              ) -> tuple[subprocess.Popen[str], registry.Registration]:
    """Start the coordinator of an instance registered just now with ports drawn for it.

    Another program may take such a port in the moment before the coordinator listens;
    the instance is then registered again with new ports (it has run nowhere yet, and
    nobody else knows its ports), up to ``FIRST_START_TRIES`` times, instead of keeping
    a registration whose every start fails on that port.

    Raises:
        CoordinatorError: the coordinator could not start.
    """
    for attempt in range(1, FIRST_START_TRIES + 1):
        try:
            return start(reg, home, log, stopping, options), reg
        except CoordinatorError as err:
            if attempt == FIRST_START_TRIES or not port_taken(err) or stopping():
                raise
            rp, sp, icp = registry.unregistered_free_ports(3, home)
            log.warning("%s; registering %s again with new ports (receive port %d, send "
                        "port %d)", err, reg.instance_name, rp, sp)
            reg = registry.register(instance_name=reg.instance_name, receive_port=rp,
                                    send_port=sp, ic_port=icp, log_dir=reg.log_dir,
                                    current_version=reg.current_version, home=home)
    raise AssertionError("unreachable")


def port_taken(err: CoordinatorError) -> bool:
    """Whether a coordinator failed to start because a port of its was in use."""
    text = str(err)
    return "cannot listen" in text and os.strerror(errno.EADDRINUSE) in text


def register_upgrade(reg: registry.Registration, version: int, home: Path,
                     log: logging.Logger) -> registry.Registration:
    """Register the upgrade of ``reg`` to ``version`` (the ``--upgrade-to`` class's), unless
    there is nothing to do: an upgrade is registered already (the user chose it), the
    instance runs that version or a newer one, it has no checkpoint yet to upgrade from,
    or it is active/active (a replica performs the upgrade: ``add-replica -uv``)."""
    if reg.active_active or reg.upgrading or version <= reg.current_version:
        return reg
    if not logstore.file_numbers(registry.instance_dir(reg), "serverchkpt"):
        return reg
    reg = registry.set_versions(reg.instance_name, reg.current_version, version, home)
    log.info("registered the upgrade of %s from version %d to version %d", reg.instance_name,
             reg.current_version, version)
    return reg


def replay_estimate(reg: registry.Registration, log: logging.Logger) -> int | None:
    """About how many records the coordinator we are about to start will replay, from its
    log files (read before it starts: its recovery ends by removing them)."""
    try:
        est = recovery.estimate_replay(registry.instance_dir(reg))
    except OSError:
        return None
    if est is None:
        return None
    log.info("the log to replay holds %s%d records (%d bytes)", "" if est.exact else "about ",
             est.records, est.log_bytes)
    return est.records


def start(reg: registry.Registration, home: Path, log: logging.Logger,
          stopping: Callable[[], bool] = lambda: False,
          options: Sequence[str] = ()) -> subprocess.Popen[str]:
    """Start the coordinator; a failure is its own one-line reason, at once.

    One case is waited out: after a crash the previous run's coordinator holds the log
    lock until it notices that its binding is gone and exits, which takes a moment. If the
    lock is still held after that, another coordinator is running the instance.

    Args:
        stopping: says whether a stop was asked for meanwhile (ends the wait).
        options: more options of ``ambrosia ic`` (``--metrics ADDR``).

    Raises:
        CoordinatorError: the coordinator could not start.
    """
    name = reg.instance_name
    try:
        proc: subprocess.Popen[str] = launch.start_coordinator(name, home=home, options=options)
        return proc
    except CoordinatorError:
        lock = registry.instance_dir(reg) / LOCK_NAME
        if not lock_held(lock):
            raise
    log.warning("the log of %s is locked by another coordinator (the previous run's may "
                "still be exiting); waiting up to %g s for it", name, LOCK_WAIT_SECONDS)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while lock_held(lock) and time.monotonic() < deadline and not stopping():
        time.sleep(0.05)
    try:
        proc = launch.start_coordinator(name, home=home, options=options)
        return proc
    except CoordinatorError as err:
        if lock_held(lock):
            raise CoordinatorError(f"{err} (is {name} already running?)") from None
        raise


def lock_held(path: Path) -> bool:
    """Whether a process holds the flock on ``path`` (probed without waiting)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock we got
    return False


def stop(proc: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """Stop the coordinator as an ordinary stop (SIGTERM: it finishes the write in
    progress); ``kill -9`` only if it has not exited within ``timeout`` seconds."""
    # Not the process group: the coordinator shares ``ambrosia run``'s.
    stop_process(proc, timeout, group=False)


def was_stopped(proc: subprocess.Popen[str], timeout: float = 5.0) -> bool:
    """Whether the coordinator exited because a signal stopped it (it says so on stdout).
    Waits up to ``timeout`` seconds for it to exit."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    if proc.stdout is None:
        return False
    with contextlib.suppress(OSError, ValueError):
        return any(line.startswith(STOPPED_PREFIX) for line in proc.stdout.read().splitlines())
    return False


def how_it_ended(proc: subprocess.Popen[str]) -> str:
    """How the coordinator ended, for one line: its exit code or signal, and the last line
    it wrote (its reason, if it gave one)."""
    code = proc.poll()
    if code is None:
        return "still running"
    how = exit_status(code)
    last = getattr(proc, "last_stderr_line", "")
    prefix = "ambrosia-ic: "
    if last.startswith(prefix):  # "ambrosia-ic: NAME: reason" -> "reason"
        last = last[len(prefix):].partition(": ")[2] or last
    return f"{how}: {last}" if last else how
