"""A FUSE file system that can lose power: what was not synced is dropped at a cut.

Every operation passes through to a backing directory at once (so reads, locks and mmap
behave as on a real disk; ``flock`` takes the backing file's lock, seen through every
name of the file, but never waits), and the file system remembers how to undo whatever a power
cut would lose:

- file data written since the file's last ``fsync``/``fdatasync``: the bytes each write or
  truncate replaced (only those inside the file's synced size) and the synced size;
- directory entries changed since the directory's last ``fsync``: creations, links,
  removals and renames (a rename needs both of its directories synced).

A cut (``cut``, on the control socket) happens after the node's processes are killed: it
undoes what was not synced, newest first, writes a report of every loss (the file, the
bytes or entry lost, and the call that would have kept it), and unmounts. Mounting again
on the same backing directory is the restart. A hard link per changed inode, kept in a
stash directory beside the backing one, lets an unlinked or replaced file be restored.

Like LazyFS (Jepsen), a file's ``fsync`` does not make its directory entry durable: a new
file whose directory is never synced disappears at a cut, data and all.

    python -m tests.power.fs BACKING MOUNTPOINT --control SOCKET

The control socket takes one line per connection: ``cut`` (answered with the JSON report,
then the file system unmounts) or ``losses`` (what a cut now would drop).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import mfusepy as fuse

__all__ = ["UnsyncedFS", "main"]

_UTIME_NOW = (1 << 30) - 1  # utimensat(2)'s markers, as tv_nsec of a zero tv_sec
_UTIME_OMIT = (1 << 30) - 2


@attrs.define
class _Data:
    """Unsynced writes of one inode: how to give it back its synced bytes."""

    stash: str  # a hard link to the inode, so it can be restored under any name
    synced_size: int
    undo: list[tuple[int, bytes]] = attrs.field(factory=list)  # (offset, old bytes)
    writes: int = 0
    last_path: str = ""


@attrs.define
class _Entry:
    """One directory change not yet durable."""

    what: str  # for the report: "create a", "rename a -> b", ...
    dirs: set[str]  # the directories (mount paths) whose fsync makes it durable
    undo: Callable[[], None]
    kept: str | None = None  # what the stash holds for the undo, let go once durable


class UnsyncedFS(fuse.Operations):  # type: ignore[misc]
    """The pass-through file system with its undo journal (one lock: tests are small)."""

    use_ns = True  # times as integer nanoseconds, as os.utime takes them

    def __init__(self, root: str, stash: str) -> None:
        self.root = os.path.realpath(root)
        self.stash = stash
        os.makedirs(stash, exist_ok=True)
        self._mutex = threading.RLock()
        self.data: dict[int, _Data] = {}
        self.entries: list[_Entry] = []
        self._stash_seq = 0

    # ------------------------------------------------------------------ helpers
    def _p(self, path: str) -> str:
        return self.root + path

    def _stash_name(self, kind: str) -> str:
        self._stash_seq += 1
        return os.path.join(self.stash, f"{kind}-{self._stash_seq}")

    def _data_of(self, fh: int, path: str) -> _Data:
        st = os.fstat(fh)
        d = self.data.get(st.st_ino)
        if d is None:
            # The name the kernel gave is the inode's current one (an unlinked file
            # gets no writes here: the file system removes names for good).
            name = self._stash_name("ino")
            os.link(self._p(path), name)
            if os.lstat(name).st_ino != st.st_ino:
                raise fuse.FuseOSError(errno.ESTALE)
            d = self.data[st.st_ino] = _Data(name, st.st_size)
        d.last_path = path
        return d

    def _keep_old(self, d: _Data, fd: int, offset: int, length: int) -> None:
        """Save the synced bytes ``[offset, offset + length)`` are about to replace."""
        end = min(offset + length, d.synced_size)
        if offset < end:
            d.undo.append((offset, os.pread(fd, end - offset, offset)))

    @staticmethod
    def _parent(path: str) -> str:
        return os.path.dirname(path) or "/"

    def _journal(self, what: str, dirs: set[str], undo: Callable[[], None],
                 kept: str | None = None) -> None:
        self.entries.append(_Entry(what, dirs, undo, kept))

    def _remove_any(self, real: str) -> None:
        if os.path.isdir(real) and not os.path.islink(real):
            shutil.rmtree(real)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(real)

    def _set_aside(self, real: str) -> str | None:
        """Keep what ``real`` names (about to be replaced or removed) in the stash."""
        if not os.path.lexists(real):
            return None
        kept = self._stash_name("ent")
        if os.path.isdir(real) and not os.path.islink(real):
            os.mkdir(kept)  # an empty directory (rmdir and rename only take empty ones)
            shutil.copystat(real, kept)
        else:
            os.link(real, kept, follow_symlinks=False)
        return kept

    def _put_back(self, kept: str | None, real: str) -> None:
        if kept is None or not os.path.isdir(os.path.dirname(real)):
            return  # nothing kept, or its directory is gone for good (its removal synced)
        self._remove_any(real)
        if os.path.isdir(kept):
            os.rename(kept, real)
        else:
            os.link(kept, real, follow_symlinks=False)

    # ------------------------------------------------------------------ reads
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._p(path))
        attrs = {k: getattr(st, k) for k in (
            "st_gid", "st_mode", "st_nlink", "st_size", "st_uid", "st_ino")}
        # Times in nanoseconds (``use_ns``): in seconds they would read as 1970.
        attrs.update(st_atime=st.st_atime_ns, st_ctime=st.st_ctime_ns,
                     st_mtime=st.st_mtime_ns)
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._p(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._p(path))

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._p(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._p(path))
        return {k: getattr(sv, k) for k in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            # Read-write always (the kernel may read around a write), never appending
            # (the kernel gives every write its offset).
            access = os.O_RDONLY if flags & os.O_ACCMODE == os.O_RDONLY else os.O_RDWR
            fd = os.open(self._p(path), access)
            if flags & os.O_TRUNC:
                self._truncate_fd(fd, path, 0)
            return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    # ------------------------------------------------------------------ file data
    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            d = self._data_of(fh, path)
            self._keep_old(d, fh, offset, len(data))
            d.writes += 1
            return os.pwrite(fh, data, offset)

    def _truncate_fd(self, fd: int, path: str, length: int) -> None:
        d = self._data_of(fd, path)
        size = os.fstat(fd).st_size
        if length < size:
            self._keep_old(d, fd, length, size - length)
        d.writes += 1
        os.ftruncate(fd, length)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            if fh is not None:
                self._truncate_fd(fh, path, length)
                return 0
            fd = os.open(self._p(path), os.O_RDWR)  # reads what the cut gives back
            try:
                self._truncate_fd(fd, path, length)
            finally:
                os.close(fd)
            return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode:
            raise fuse.FuseOSError(errno.EOPNOTSUPP)
        with self._mutex:
            current = os.fstat(fh).st_size
            if offset + size > current:
                self._data_of(fh, path).writes += 1
            os.posix_fallocate(fh, offset, size)
            return 0

    def flock(self, path: str, fh: int, op: int) -> int:
        # The backing file's lock, not the kernel's own: FUSE's path API gives each name
        # of a file an inode of its own in the kernel, so a lock taken through one name
        # and kept after a hard link (an active/active epoch claim) would be invisible
        # through the other. A request that would wait fails instead (EWOULDBLOCK): this
        # file system serves one call at a time, and the unlock it waits for is one.
        try:
            fcntl.flock(fh, op | fcntl.LOCK_NB)
        except BlockingIOError:
            raise fuse.FuseOSError(errno.EWOULDBLOCK) from None
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            ino = os.fstat(fh).st_ino
            d = self.data.pop(ino, None)
            if d is not None:
                os.unlink(d.stash)
            return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            for e in self.entries:
                e.dirs.discard(path)
                if not e.dirs and e.kept is not None:  # durable: its undo is not needed
                    self._remove_any(e.kept)
            self.entries = [e for e in self.entries if e.dirs]
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        real = self._p(path)
        if times is None:
            os.utime(real)
            return 0
        # libfuse passes utimensat's "now" and "leave as is" as a zero second and the
        # marker in the nanoseconds; taken as times they would set 1970 (a lease touched
        # with os.utime(path) would look expired at once).
        st = os.lstat(real)
        now = time.time_ns()
        atime, mtime = (now if t == _UTIME_NOW else old if t == _UTIME_OMIT else t
                        for t, old in zip(times, (st.st_atime_ns, st.st_mtime_ns),
                                          strict=True))
        os.utime(real, ns=(atime, mtime))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._p(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._p(path), uid, gid)
        return 0

    # ------------------------------------------------------------------ entries
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mutex:
            real = self._p(path)
            fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
            self.data[os.fstat(fd).st_ino] = _Data(self._link_stash(real), 0, last_path=path)
            self._journal(f"create {path}", {self._parent(path)},
                          lambda: self._remove_any(real))
            return fd

    def _link_stash(self, real: str) -> str:
        name = self._stash_name("ino")
        os.link(real, name)
        return name

    def mknod(self, path: str, mode: int, dev: int) -> int:
        with self._mutex:
            real = self._p(path)
            os.mknod(real, mode, dev)
            if stat.S_ISREG(mode):
                self.data[os.lstat(real).st_ino] = _Data(self._link_stash(real), 0,
                                                         last_path=path)
            self._journal(f"create {path}", {self._parent(path)},
                          lambda: self._remove_any(real))
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            real = self._p(path)
            os.mkdir(real, mode)
            self._journal(f"mkdir {path}", {self._parent(path)},
                          lambda: self._remove_any(real))
            return 0

    def symlink(self, target: str, source: str) -> int:
        with self._mutex:
            real = self._p(target)
            os.symlink(source, real)
            self._journal(f"symlink {target}", {self._parent(target)},
                          lambda: self._remove_any(real))
            return 0

    def link(self, target: str, source: str) -> int:
        with self._mutex:
            real = self._p(target)
            os.link(self._p(source), real)
            self._journal(f"link {source} -> {target}", {self._parent(target)},
                          lambda: self._remove_any(real))
            return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            real = self._p(path)
            kept = self._set_aside(real)
            os.unlink(real)
            self._journal(f"unlink {path}", {self._parent(path)},
                          lambda: self._put_back(kept, real), kept)
            return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            real = self._p(path)
            kept = self._set_aside(real)
            os.rmdir(real)
            self._journal(f"rmdir {path}", {self._parent(path)},
                          lambda: self._put_back(kept, real), kept)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            real_old, real_new = self._p(old), self._p(new)
            replaced = self._set_aside(real_new)
            os.rename(real_old, real_new)

            def undo() -> None:
                if os.path.isdir(os.path.dirname(real_old)):
                    self._remove_any(real_old)
                    os.rename(real_new, real_old)
                else:  # the source's directory is gone for good: so is what was moved
                    self._remove_any(real_new)
                self._put_back(replaced, real_new)

            self._journal(f"rename {old} -> {new}" + (" (replacing it)" if replaced else ""),
                          {self._parent(old), self._parent(new)}, undo, replaced)
            return 0

    # ------------------------------------------------------------------ the cut
    def losses(self) -> list[str]:
        """What a cut now would lose, one line each, naming the call that would keep it."""
        lines = []
        for d in self.data.values():
            # Only an inode with a name, or one a cut gives back, can lose anything.
            if d.writes and os.stat(d.stash).st_nlink > 1:
                size = os.stat(d.stash).st_size
                lines.append(f"{d.last_path}: {d.writes} write(s) since its last fsync "
                             f"(size {size}, synced {d.synced_size}); fsync({d.last_path}) "
                             "would keep them")
        for e in self.entries:
            lines.append(f"{e.what}: fsync of {', '.join(sorted(e.dirs))} would keep it")
        return lines

    def cut(self) -> list[str]:
        """Drop everything not synced (the node's processes are dead): entries first,
        newest first, then file data through the stash links."""
        with self._mutex:
            report = self.losses()
            for e in reversed(self.entries):
                e.undo()
            self.entries = []
            for d in self.data.values():
                with open(d.stash, "r+b") as f:
                    for offset, old in reversed(d.undo):
                        f.seek(offset)
                        f.write(old)
                    f.truncate(d.synced_size)
                    os.fsync(f.fileno())
                os.unlink(d.stash)
            self.data = {}
            shutil.rmtree(self.stash, ignore_errors=True)
            return report


def _serve_control(fs: UnsyncedFS, path: str, mountpoint: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server.bind(path)
    server.listen()
    while True:
        conn, _ = server.accept()
        with conn:
            command = conn.makefile("r").readline().strip()
            if command == "losses":
                conn.sendall(json.dumps(fs.losses()).encode() + b"\n")
            elif command == "cut":
                report = fs.cut()
                conn.sendall(json.dumps(report).encode() + b"\n")
                conn.close()
                # Unmounting ends fuse's loop in the main thread; the process exits.
                subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)
                return
            else:
                conn.sendall(b'{"error": "unknown command"}\n')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.power.fs",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--control", required=True, metavar="SOCKET")
    args = parser.parse_args(argv)
    backing = os.path.realpath(args.backing)
    fs = UnsyncedFS(backing, backing.rstrip("/") + ".stash")
    threading.Thread(target=_serve_control, args=(fs, args.control, args.mountpoint),
                     daemon=True).start()
    fuse.FUSE(fs, args.mountpoint, foreground=True, nothreads=True,
              hard_remove=True, fsname="unsyncedfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
