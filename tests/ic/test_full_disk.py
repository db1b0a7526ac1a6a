"""A full disk under the coordinator's log stops the instance with one line saying so (it
said "internal error: OSError: [Errno 28] ..."), and nothing acknowledged before is lost:
with space again, the instance recovers what was logged."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_core.ports import free_ports
from ambrosia_py import Immortal, impulse
from tests.launcher import Launcher, launcher  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

PAD = b"x" * (64 << 10)


class DiskFiller(Immortal):
    """Logs Impulses of 64 KiB as fast as it can, counting those applied."""

    def __init__(self) -> None:
        self.applied = 0

    def on_become_primary(self) -> None:
        threading.Thread(target=self._fill, daemon=True).start()

    def _fill(self) -> None:
        try:
            while True:
                self.impulse_self.fill(PAD)
        except Exception:  # the instance stops under it
            return

    @impulse
    def fill(self, pad: bytes) -> None:
        self.applied += 1
        if self.applied % 16 == 0:
            self.ctx.log.info("applied %d", self.applied)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB file system of its own (tmpfs, mounted by the test as root)."""
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_stops_the_instance_in_one_line(launcher: Launcher,  # noqa: F811
                                                     small_disk: Path) -> None:
    rp, sp, ip = free_ports(3)
    registry.register(instance_name="full", receive_port=rp, send_port=sp, ic_port=ip,
                      log_dir=small_disk, home=launcher.home)
    p = launcher.start("tests.ic.test_full_disk:DiskFiller", "full", primary=False)
    assert p.proc.wait(120) == 1
    p.kill()
    line = p.lines[-1]
    assert line.startswith("ambrosia run: error: the coordinator of full stopped"), p.lines[-5:]
    said = "\n".join(p.lines)
    assert "No space left on device" in said and "internal error" not in said, p.lines[-5:]
    assert "free some space, then start it again" in said
    # With space again, it starts again from what it logged and goes on.
    subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], check=True)
    again = launcher.start("tests.ic.test_full_disk:DiskFiller", "full", primary=False)
    again.wait_for("became primary", 60)
    again.wait_for("applied ", 60)
    assert again.stop() == 0


def test_a_log_writer_writes_nothing_after_a_failed_write() -> None:
    """The same record written again after a failed write stood twice in the log, which
    then no longer recovered ("sequence id 4 where 5 was expected")."""
    import errno

    from ambrosia_ic.logstore.writer import LogWriter

    writer = LogWriter(Path("/dev/full"))  # every write: ENOSPC
    try:
        with pytest.raises(OSError) as first:
            writer.write(b"record")
        assert first.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as again:
            writer.write(b"record")
        assert again.value.errno == errno.ENOSPC
        assert "an earlier write failed" in str(again.value)
        assert "nothing more is written to this log" in str(again.value)
    finally:
        os.close(writer._fd)  # /dev/full cannot be trimmed
