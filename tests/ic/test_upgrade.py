"""Standalone live upgrade: register with --upgrade-version M and restart."""

from __future__ import annotations

from ambrosia_core.wire import CONTROL_SEQ, UpgradeTakeCheckpoint, encode_control_record
from tests.launcher import wait_until

from .conftest import Harness
from .rawbinding import CounterApp, Driver
from .test_first_start import _run_chain


def _server_files(d) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(p.name for p in d.iterdir()
                  if p.name.startswith(("serverlog", "serverchkpt")))


def _run_v1(harness: Harness) -> tuple[object, dict[str, object]]:
    harness.register("up")
    proc = harness.start("up")
    d1 = harness.drive("up")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 5)
    state = d1.state()
    proc.terminate()  # stop the current instance (standalone upgrades have downtime)
    proc.wait()
    d1.thread.join(30)
    return proc, state


def test_upgrade_writes_version_m_and_a_restart_recovers_it(harness: Harness) -> None:
    _, v1_state = _run_v1(harness)
    reg = harness.reg("up")
    old_dir = harness.instance_dir("up")
    old_files = {p.name: p.read_bytes() for p in old_dir.iterdir()
                 if p.name.startswith(("serverlog", "serverchkpt"))}
    r = harness.cli("register-instance", "-i", "up", "-rp", str(reg.receive_port),
                    "-sp", str(reg.send_port), "-p", str(reg.ic_port), "-l", str(harness.logs),
                    "--current-version", "0", "--upgrade-version", "3")
    assert r.returncode == 0, r.stderr
    proc = harness.start("up")
    d2 = harness.drive("up")
    wait_until(d2.primary.is_set, "upgraded primary")
    assert d2.events == ["checkpoint-loaded", "upgrade-take-checkpoint"]
    # The control record carries UpgradeTakeCheckpoint: [02 0A] in a -1 record.
    control = encode_control_record(reg.committer_id, UpgradeTakeCheckpoint())
    assert control[16:24] == CONTROL_SEQ.to_bytes(8, "little", signed=True)
    assert control[24:] == b"\x02\x0a"
    assert control in bytes(d2.b.received)
    assert d2.state() == {**v1_state, "version": 2, "v2_handled": 0}
    new_dir = harness.logs / "up_3"
    wait_until(lambda: harness.reg("up").current_version == 3, "registration updated")
    assert harness.reg("up").upgrade_version == 3
    assert _server_files(new_dir) == ["serverchkpt2", "serverlog2"]
    # Version 0's files are untouched.
    assert {n: (old_dir / n).read_bytes() for n in old_files} == old_files
    assert _server_files(old_dir) == sorted(old_files)
    # The new code runs, and its work lands in version 3's log.
    _run_chain(d2, 5, 8)
    assert d2.state()["v2_handled"] == 9  # 3 impulses, 3 self-calls, 3 acks
    before = d2.state()
    harness.kill9(proc)
    d2.thread.join(30)
    # A restart recovers version 3 normally.
    harness.start("up")
    d3 = harness.drive("up")
    wait_until(d3.primary.is_set, "recovered primary")
    assert d3.events == ["checkpoint-loaded", "take-becoming-primary-checkpoint"]
    assert d3.state() == before
    mark = d2.marks["upgrade-take-checkpoint"]
    assert d3.records == d2.records[mark:]
    _run_chain(d3, 8, 9)
    assert d3.state()["sent"] == [f"up:{k}" for k in range(9)]
    assert {n: (old_dir / n).read_bytes() for n in old_files} == old_files


def test_binding_dying_before_the_new_checkpoint_leaves_version_n_to_retry(
    harness: Harness,
) -> None:
    _, v1_state = _run_v1(harness)
    reg = harness.reg("up")
    old_dir = harness.instance_dir("up")
    old_files = {p.name: p.read_bytes() for p in old_dir.iterdir()
                 if p.name.startswith(("serverlog", "serverchkpt"))}
    from ambrosia_ic import registry

    registry.register(instance_name="up", receive_port=reg.receive_port,
                      send_port=reg.send_port, ic_port=reg.ic_port, log_dir=harness.logs,
                      current_version=0, upgrade_version=1, home=harness.home)
    proc = harness.start("up")
    d2 = Driver(harness.connect("up"), CounterApp("up"))
    d2.die_at = "upgrade-take-checkpoint"
    d2.start().thread.join(30)
    assert d2.events == ["checkpoint-loaded", "died-at-upgrade-take-checkpoint"]
    assert proc.wait(30) == 1  # the coordinator fails with its binding
    assert "binding closed its connection" in harness.stderr_of(proc)
    new_dir = harness.logs / "up_1"
    assert "serverchkpt" not in " ".join(_server_files(new_dir))
    assert harness.reg("up").current_version == 0
    assert harness.reg("up").upgrade_version == 1
    assert {n: (old_dir / n).read_bytes() for n in old_files} == old_files
    # The restart retries the upgrade from version 0 and succeeds.
    harness.start("up")
    d3 = harness.drive("up")
    wait_until(d3.primary.is_set, "upgraded primary")
    assert d3.events == ["checkpoint-loaded", "upgrade-take-checkpoint"]
    assert d3.state() == {**v1_state, "version": 2, "v2_handled": 0}
    wait_until(lambda: harness.reg("up").current_version == 1, "registration updated")
    assert _server_files(new_dir) == ["serverchkpt2", "serverlog2"]
    _run_chain(d3, 5, 6)
