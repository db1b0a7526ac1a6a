"""An unusable log directory is one line and exit code 1, at registration and at start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_ic.logdir import check_log_dir

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.ports import free_ports
from tests.launcher import ROOT

from .conftest import Harness
from .test_cli import _one_line_error


def _register(harness: Harness, name: str, log_dir: Path) -> subprocess.CompletedProcess[str]:
    rp, sp, ip = free_ports(3)
    return harness.cli("register-instance", "-i", name, "-rp", str(rp), "-sp", str(sp),
                       "-p", str(ip), "-l", str(log_dir))


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory no file can be created in, even by root: without write permission, and
    (as root ignores permissions) marked immutable."""
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(d)], check=True)
        immutable = True
    try:
        with pytest.raises(OSError):  # the premise: creating a file really fails
            (d / "x").write_bytes(b"")
        yield d
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(d)], check=True)
        d.chmod(0o755)


def test_register_instance_refuses_an_unusable_log_dir(harness: Harness, tmp_path: Path,
                                                       read_only_dir: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    why = "Operation not permitted" if os.geteuid() == 0 else "Permission denied"
    for log_dir, reason in (
            (a_file, f"log directory {a_file} is a file, not a directory"),
            (a_file / "logs", f"log directory {a_file / 'logs'} cannot be created: {a_file} "
                              "is a file, not a directory"),
            (a_file / "deeper" / "logs", f"log directory {a_file / 'deeper' / 'logs'} cannot "
                                         f"be created: {a_file} is a file, not a directory"),
            (read_only_dir, f"log directory {read_only_dir} is not writable: {why}"),
            (read_only_dir / "logs", f"log directory {read_only_dir / 'logs'} cannot be "
                                     f"created: {why}")):
        line = _one_line_error(_register(harness, "svc", log_dir), 1)
        assert line == f"ambrosia: error: {reason}"
    assert not (harness.home / "instances" / "svc.json").exists()
    # A usable one is created, and the probe leaves nothing behind.
    r = _register(harness, "svc", tmp_path / "new" / "logs")
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "new" / "logs").iterdir()) == []


def test_the_probe_writes_where_the_permission_bits_do_not_decide(tmp_path: Path,
                                                                   read_only_dir: Path) -> None:
    # Writable by its bits yet refusing files (as root sees it), or the reverse: only the
    # probe's real file creation tells.
    with pytest.raises(CoordinatorError, match=r"^log directory .* is not writable: "):
        check_log_dir(read_only_dir)
    assert check_log_dir(tmp_path / "fresh", create=False) == tmp_path / "fresh"
    assert not (tmp_path / "fresh").exists()  # create=False: checked, not created
    assert check_log_dir(tmp_path / "fresh") == tmp_path / "fresh"
    assert (tmp_path / "fresh").is_dir() and list((tmp_path / "fresh").iterdir()) == []


def test_ic_and_run_refuse_a_log_dir_that_became_unusable(harness: Harness) -> None:
    harness.register("svc")
    shutil.rmtree(harness.logs, ignore_errors=True)
    harness.logs.write_text("the log directory was replaced by a file")
    reason = f"log directory {harness.logs / 'svc_0'} cannot be created: {harness.logs} is a " \
             "file, not a directory"
    line = _one_line_error(harness.cli("ic", "-i", "svc"), 1)
    assert line == f"ambrosia: error: {reason}"
    env = dict(harness.env, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run",
                        "samples.counter.counter:Counter", "-i", "svc"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 10  # no retrying
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"ambrosia run: error: {reason}"]
