"""An interrupted first start is a first start again: until the InitialMessage is durably
logged as record 0, whatever files the attempt left, the next start runs the first start
(so ``on_first_start`` runs exactly once, never 0 or 2 times). A busy port stops a start
before anything is written."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from ambrosia_ic.logstore import (
    LogScan,
    encode_disk_record,
    log_path,
    remove_first_start_leftovers,
    write_checkpoint,
)
from ambrosia_ic.recovery import first_start_pending, interrupted_first_start

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.wire import Checkpoint, InitialMessage, TakeBecomingPrimaryCheckpoint
from ambrosia_py.testing import start_immortal
from tests.launcher import wait_until

from .conftest import Harness

ROOT = Path(__file__).resolve().parents[2]
CID = 77


def _server_files(d: Path) -> list[str]:
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir()
                  if p.name.startswith("server") and p.name != "serverlock")


def _record0() -> bytes:
    disk, _ = encode_disk_record(CID, 0, InitialMessage(b"hello").encode(), {})
    return disk


def _leftovers(d: Path, log: bytes | None) -> None:
    d.mkdir(parents=True, exist_ok=True)
    state = {"format": 1, "next_seq": 0, "inputs": {}, "outputs": {}}
    blob = b'{"sent": [], "received": [], "acked": [], "initial": []}'
    write_checkpoint(d, 1, state, Checkpoint(len(blob)).encode(), [blob])
    if log is not None:
        log_path(d, 1).write_bytes(log)


@pytest.mark.parametrize(("log", "pending"), [
    (None, True),  # killed after checkpoint 1, before log 1 was created
    (b"", True),  # killed after log 1 was created, before record 0
    ("torn", True),  # killed while record 0 was being written
    ("whole", False),  # record 0 is durable: the first start happened
])
def test_interrupted_first_start_is_told_by_record_0(tmp_path: Path, log: object,
                                                     pending: bool) -> None:
    d = tmp_path / "i_0"
    whole = _record0()
    data = {None: None, b"": b"", "torn": whole[:-5], "whole": whole}[log]  # type: ignore[index]
    _leftovers(d, data)
    assert interrupted_first_start(d, CID) is pending
    assert first_start_pending(d, CID) is pending


def test_checkpoint_2_is_never_an_interrupted_first_start(tmp_path: Path) -> None:
    d = tmp_path / "i_0"
    d.mkdir()
    write_checkpoint(d, 2, {"format": 1}, Checkpoint(2).encode(), [b"{}"])
    log_path(d, 2).write_bytes(b"")
    assert not interrupted_first_start(d, CID)
    assert not first_start_pending(d, CID)


def test_binding_killed_right_after_the_first_checkpoint_first_starts_again(
    harness: Harness,
) -> None:
    reg = harness.register("alpha")
    proc = harness.start("alpha")
    b = harness.connect("alpha")
    rec, _ = b.record()
    assert rec.messages == [TakeBecomingPrimaryCheckpoint()]
    b.send(InitialMessage(b"hello"))
    b.send_checkpoint(b'{"sent": [], "received": [], "acked": [], "initial": []}')
    b.close()  # the binding dies (kill -9) right after its first checkpoint
    assert proc.wait(30) == 1
    idir = harness.instance_dir("alpha")
    # The attempt left checkpoint 1, but no record 0: it did not happen.
    assert "serverchkpt1" in _server_files(idir)
    logs = [log_path(idir, 1)] if log_path(idir, 1).exists() else []
    assert all(not list(LogScan(p)) for p in logs)

    proc2 = harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after the restart")
    assert d2.events == ["take-becoming-primary-checkpoint"]  # a first start, no recovery
    wait_until(lambda: d2.snapshot()["initial"] == ["hello"], "record 0 delivered")
    assert d2.parsed[0].seq_id == 0 and d2.parsed[0].committer_id == reg.committer_id
    err = harness.stderr_of(proc2)
    assert ("ambrosia-ic: alpha: the first start was interrupted before its InitialMessage "
            "was logged; starting afresh") in err.splitlines()
    # And it stays done: the next start recovers record 0, it does not start afresh.
    harness.kill9(proc2)
    d2.thread.join(30)
    harness.start("alpha")
    d3 = harness.drive("alpha")
    wait_until(d3.primary.is_set, "primary after recovery")
    assert d3.events == ["checkpoint-loaded", "take-becoming-primary-checkpoint"]
    assert d3.snapshot()["initial"] == ["hello"]


def test_a_busy_ic_port_fails_the_start_before_anything_is_written(harness: Harness) -> None:
    reg = harness.register("alpha")
    holder = socket.socket()
    holder.bind(("127.0.0.1", reg.ic_port))
    holder.listen()
    try:
        r = harness.cli("ic", "--instance-name", "alpha")
    finally:
        holder.close()
    assert r.returncode == 1
    assert r.stderr == (f"ambrosia: error: cannot listen for links on 127.0.0.1:{reg.ic_port}: "
                        "Address already in use\n")
    assert "ambrosia-ic ready" not in r.stdout
    assert _server_files(harness.instance_dir("alpha")) == []
    # With the port free, the start is a first start.
    harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    assert d.events == ["take-becoming-primary-checkpoint"]
    wait_until(lambda: d.snapshot()["initial"] == ["hello"], "record 0 delivered")


def test_counter_sample_with_its_link_port_held_counts_exactly_once(tmp_path: Path) -> None:
    """The README's promise for ``samples.counter``: never 0 or 2, even when the first
    ``ambrosia run`` cannot listen on the instance's link port."""
    from ambrosia_ic import registry

    from ambrosia_core.ports import free_ports

    home = tmp_path / "home"
    rp, sp, ip = free_ports(3)
    registry.register(instance_name="counter", receive_port=rp, send_port=sp, ic_port=ip,
                      log_dir=tmp_path / "logs", home=home)
    holder = socket.socket()
    holder.bind(("127.0.0.1", ip))
    holder.listen()
    try:
        first = start_immortal("samples.counter.counter:Counter", "counter", home=home,
                               cwd=ROOT, primary=False)
        assert first.proc.wait(120) == 1
        first.kill()
    finally:
        holder.close()
    assert not any("became primary" in line for line in first.lines)
    assert any(f"cannot listen for links on 127.0.0.1:{ip}" in line for line in first.lines)
    idir = tmp_path / "logs" / "counter_0"
    assert _server_files(idir) == []
    second = start_immortal("samples.counter.counter:Counter", "counter", home=home, cwd=ROOT)
    try:
        second.wait_for("count is 1")
    finally:
        second.kill()
    third = start_immortal("samples.counter.counter:Counter", "counter", home=home, cwd=ROOT)
    try:
        line = third.wait_for("on becoming primary")
        assert line.endswith("count is 1 on becoming primary")
    finally:
        third.kill()


def test_leftovers_of_an_interrupted_first_start_are_removed(harness: Harness) -> None:
    """Checkpoint 1 and an empty log 1 (the coordinator killed between them and record
    0): the next start replaces them with its own."""
    reg = harness.register("alpha")
    idir = harness.instance_dir("alpha")
    _leftovers(idir, b"")
    (idir / "serverdigest1").write_bytes(bytes(16))
    before = (idir / "serverchkpt1").read_bytes()
    harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    assert d.events == ["take-becoming-primary-checkpoint"]
    wait_until(lambda: d.snapshot()["initial"] == ["hello"], "record 0 delivered")
    assert (idir / "serverchkpt1").read_bytes() != before
    recs = list(LogScan(log_path(idir, 1), committer_id=reg.committer_id))
    assert recs[0].body == InitialMessage(b"hello").encode()
    assert os.path.getsize(idir / "serverdigest1") == 0  # the old digest went too


def test_orphan_files_are_not_mistaken_for_an_interrupted_start(tmp_path: Path) -> None:
    d = tmp_path / "i_0"
    d.mkdir()
    log_path(d, 1).write_bytes(_record0())
    with pytest.raises(CoordinatorError) as info:
        first_start_pending(d, CID)
    assert str(info.value) == (
        f"{d}: serverlog1 exists but no checkpoint, so its records cannot be recovered; "
        "restore the checkpoint, or move the directory away to start afresh")



def test_always_recover_refuses_the_leftovers_of_an_interrupted_first_start(
    harness: Harness,
) -> None:
    harness.register("alpha", create_service="always-recover")
    idir = harness.instance_dir("alpha")
    _leftovers(idir, b"")
    r = harness.cli("ic", "--instance-name", "alpha")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"ambrosia: error: alpha: --create-service always-recover, but {idir} "
                        "holds no checkpoint to recover from (only the leftovers of an "
                        "interrupted first start)\n")
    assert _server_files(idir) == ["serverchkpt1", "serverlog1"]  # left as found


def test_leftover_removal_refuses_a_directory_with_a_later_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "i_0"
    _leftovers(d, _record0())
    write_checkpoint(d, 2, {"format": 1, "next_seq": 1, "inputs": {}, "outputs": {}},
                     Checkpoint(2).encode(), [b"{}"])
    with pytest.raises(CoordinatorError) as info:
        remove_first_start_leftovers(d)
    assert str(info.value) == (f"{d}: holds checkpoint 2, so it is not the leftovers of a "
                               "first start; refusing to start afresh")
    assert _server_files(d) == ["serverchkpt1", "serverchkpt2", "serverlog1"]
