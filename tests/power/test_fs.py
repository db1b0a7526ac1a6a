"""The unsynced file system loses exactly what a power cut would: file data since the
file's last fsync, directory entries since the directory's last fsync; nothing synced."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from ambrosia_core.durable import fsync_dir, replace_durably

from .disk import PowerDisk


def _append(path: Path, data: bytes, *, sync: bool) -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def test_file_data_survives_only_up_to_its_last_fsync(disk: PowerDisk) -> None:
    log = disk.mount / "log"
    _append(log, b"synced;", sync=True)
    fsync_dir(disk.mount)
    _append(log, b"lost", sync=False)
    assert log.read_bytes() == b"synced;lost"
    report = disk.restart()
    assert log.read_bytes() == b"synced;"
    assert len(report) == 1 and "/log: 1 write(s) since its last fsync" in report[0]
    assert "fsync(/log) would keep them" in report[0]


def test_overwrites_and_truncation_of_synced_bytes_come_back(disk: PowerDisk) -> None:
    f = disk.mount / "data"
    f.write_bytes(b"0123456789")
    fd = os.open(f, os.O_RDWR)
    os.fsync(fd)
    fsync_dir(disk.mount)
    os.pwrite(fd, b"ab", 2)
    os.ftruncate(fd, 5)
    os.pwrite(fd, b"XYZ", 7)  # past the end: a hole, then bytes
    os.close(fd)
    assert f.read_bytes() == b"01ab4\0\0XYZ"
    disk.restart()
    assert f.read_bytes() == b"0123456789"


def test_fdatasync_keeps_data_too(disk: PowerDisk) -> None:
    f = disk.mount / "wal"
    _append(f, b"", sync=True)
    fsync_dir(disk.mount)
    with open(f, "ab") as w:
        w.write(b"record")
        w.flush()
        os.fdatasync(w.fileno())
    disk.restart()
    assert f.read_bytes() == b"record"


def test_a_new_file_needs_its_directory_synced(disk: PowerDisk) -> None:
    (disk.mount / "d").mkdir()
    fsync_dir(disk.mount)
    _append(disk.mount / "d" / "kept", b"k", sync=True)
    fsync_dir(disk.mount / "d")
    _append(disk.mount / "d" / "gone", b"g", sync=True)  # its entry is never synced
    report = disk.restart()
    assert sorted(os.listdir(disk.mount / "d")) == ["kept"]
    assert (disk.mount / "d" / "kept").read_bytes() == b"k"
    assert report == ["create /d/gone: fsync of /d would keep it"]


def test_a_rename_without_a_directory_fsync_comes_undone(disk: PowerDisk) -> None:
    target = disk.mount / "checkpoint"
    replace_durably(target, b"old")  # the project's way: tmp, fsync, rename, fsync dir
    tmp = disk.mount / "checkpoint.tmp"
    _append(tmp, b"new", sync=True)
    os.rename(tmp, target)  # the directory is not synced after it
    assert target.read_bytes() == b"new"
    report = disk.restart()
    assert target.read_bytes() == b"old"
    assert not tmp.exists()  # its creation was not durable either
    assert "rename /checkpoint.tmp -> /checkpoint (replacing it): fsync of / would keep it" \
        in report


def test_replace_durably_and_unlink_with_fsync_survive(disk: PowerDisk) -> None:
    replace_durably(disk.mount / "a", b"first")
    replace_durably(disk.mount / "a", b"second")
    (disk.mount / "b").write_bytes(b"b")
    os.sync()  # not a file or directory fsync: changes nothing here
    fsync_dir(disk.mount)
    os.unlink(disk.mount / "b")
    fsync_dir(disk.mount)
    os.unlink(disk.mount / "a")  # not synced: comes back, with its synced content
    assert disk.restart() == ["unlink /a: fsync of / would keep it"]
    assert sorted(os.listdir(disk.mount)) == ["a"]
    assert (disk.mount / "a").read_bytes() == b"second"


def test_touching_a_file_sets_now_and_leaves_what_it_omits(disk: PowerDisk) -> None:
    # An active/active lease is a heartbeat through the epoch file's mtime (os.utime).
    f = disk.mount / "lease"
    f.write_bytes(b"")
    os.utime(f, ns=(5 * 10**9, 7 * 10**9))
    before = time.time()
    os.utime(f)
    st = os.stat(f)
    assert before - 1 <= st.st_mtime <= time.time() + 1
    assert before - 1 <= st.st_atime <= time.time() + 1
    os.utime(f, ns=(3 * 10**9, 4 * 10**9))
    subprocess.run(["touch", "-m", str(f)], check=True)  # the access time: UTIME_OMIT
    st = os.stat(f)
    assert st.st_atime_ns == 3 * 10**9 and before - 1 <= st.st_mtime <= time.time() + 1


def test_a_lock_is_seen_through_every_name_of_the_file(disk: PowerDisk) -> None:
    # An epoch claim: locked under a temporary name, hard-linked to the epoch's name, and
    # held; a standby tests the lock through the epoch's name.
    tmp, name = disk.mount / ".claim.tmp", disk.mount / "epoch"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.link(tmp, name)
    os.unlink(tmp)
    other = os.open(name, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.close(fd)  # the holder dies
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
    finally:
        os.close(other)
