"""The coordinator keeps the last K checkpoints with their logs and digests, so a repro
can start from any of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ambrosia_ic import registry

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.ports import free_ports
from ambrosia_core.wire import TakeCheckpoint
from ambrosia_py.testing import checkpoints, repro, start_immortal
from samples.counter.counter import Counter
from tests.launcher import wait_until

from .conftest import Harness
from .rawbinding import CounterApp
from .test_debug_instance import _debug
from .test_first_start import _run_chain

ROOT = Path(__file__).resolve().parents[2]


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()
                  if p.name.startswith(("serverlog", "serverchkpt", "serverdigest")))


def _kept(*numbers: int) -> list[str]:
    return sorted(f"{prefix}{n}" for n in numbers
                  for prefix in ("serverchkpt", "serverdigest", "serverlog"))


def test_exactly_the_last_k_checkpoints_stay_with_their_logs(harness: Harness) -> None:
    harness.register("alpha", keep_checkpoints=3)
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    idir = harness.instance_dir("alpha")
    expected = {2: (1, 2), 3: (1, 2, 3), 4: (2, 3, 4), 5: (3, 4, 5)}
    for n in range(2, 6):
        _run_chain(d, n - 2, n - 1)
        d.b.send(TakeCheckpoint())
        wait_until(lambda n=n: _files(idir) == _kept(*expected[n]), f"checkpoints {expected[n]}")
    harness.kill9(proc)
    d.thread.join(30)
    harness.start("alpha")  # a recovery writes checkpoint 6 and keeps 4, 5, 6
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    wait_until(lambda: _files(idir) == _kept(4, 5, 6), "checkpoints 4, 5, 6")


def test_a_checkpoint_asked_for_during_another_is_taken_after_it(harness: Harness) -> None:
    # The second request arrives while checkpoint 2 is being collected: the state being
    # saved predates it, so a third checkpoint must follow (it was once dropped).
    harness.register("alpha", keep_checkpoints=5)
    harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 2)
    d.ask_while_checkpointing = 1
    d.b.send(TakeCheckpoint())
    idir = harness.instance_dir("alpha")
    wait_until(lambda: _files(idir) == _kept(1, 2, 3), "checkpoints 1, 2, 3")
    assert d.events.count("take-checkpoint") == 2
    _run_chain(d, 2, 3)  # and the coordinator goes on as before
    assert _files(idir) == _kept(1, 2, 3)


def test_debug_instance_replays_identically_from_the_older_kept_checkpoint(
    harness: Harness,
) -> None:
    harness.register("alpha")  # the default keeps 2
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 3)
    d1.b.send(TakeCheckpoint())
    idir = harness.instance_dir("alpha")
    wait_until(lambda: (idir / "serverchkpt2").exists(), "checkpoint 2")
    _run_chain(d1, 3, 5)
    harness.kill9(proc)
    d1.thread.join(30)
    proc = harness.start("alpha")  # checkpoint 3 at the restart; 1 goes, 2 stays
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    _run_chain(d2, 5, 7)
    final = d2.snapshot()
    harness.kill9(proc)
    d2.thread.join(30)
    assert _files(idir) == _kept(2, 3)
    all_records = d1.records + d2.records[d2.marks["take-becoming-primary-checkpoint"]:]
    for n, first in ((2, d1.marks["take-checkpoint"]), (3, len(d1.records))):
        d, dbg = _debug(harness, CounterApp("alpha"), "-c", str(n), "--json")
        wait_until(lambda d=d, first=first: len(d.records) == len(all_records) - first,
                   f"the replay from checkpoint {n}")
        assert d.records == all_records[first:]
        assert d.snapshot() == final
        d.b.close()
        out, err = dbg.communicate(timeout=60)
        assert dbg.returncode == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert (summary["status"], summary["checkpoint"]) == ("ok", n)
        assert summary["outputs"] == summary["recorded_outputs"]


def test_register_instance_stores_keep_checkpoints_and_refuses_0(harness: Harness) -> None:
    rp, sp, ip = free_ports(3)
    base = ["register-instance", "-i", "svc", "-rp", str(rp), "-sp", str(sp), "-p", str(ip),
            "-l", str(harness.logs)]
    r = harness.cli(*base, "--keep-checkpoints", "0")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "ambrosia: error: keep-checkpoints must be at least 1, got 0\n"
    assert harness.cli(*base, "--keep-checkpoints", "5").returncode == 0
    assert registry.load("svc", harness.home).keep_checkpoints == 5
    # An update that does not name the option keeps the registered value.
    assert harness.cli(*base).returncode == 0
    assert registry.load("svc", harness.home).keep_checkpoints == 5
    # A registration written before the option existed loads with the default.
    path = harness.home / "instances" / "svc.json"
    data = json.loads(path.read_text())
    del data["keep_checkpoints"]
    del data["check"]  # nor check bytes
    path.write_text(json.dumps(data))
    assert registry.load("svc", harness.home).keep_checkpoints == 2


def test_repro_picks_any_kept_checkpoint_of_the_counter_sample(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rp, sp, ip = free_ports(3)
    registry.register(instance_name="counter", receive_port=rp, send_port=sp, ic_port=ip,
                      log_dir=tmp_path / "logs", home=home)
    idir = tmp_path / "logs" / "counter_0"
    for n in (1, 2):  # a first start, then a recovery: checkpoints 1 and 2
        p = start_immortal("samples.counter.counter:Counter", "counter", home=home, cwd=ROOT)
        p.wait_for("count is 1")
        wait_until(lambda n=n: (idir / f"serverchkpt{n}").exists(), f"checkpoint {n}")
        p.kill()
    assert checkpoints("counter", home) == [1, 2]
    older = repro("counter", Counter, checkpoint=1, home=home)
    newer = repro("counter", Counter, checkpoint=2, home=home)
    default = repro("counter", Counter, home=home)  # the oldest kept, as before
    assert older.status == newer.status == default.status == "ok"
    assert (older.state.count, older.state.applied) == (1, [1])
    assert (newer.state.count, newer.state.applied) == (1, [1])
    assert older.records_replayed == default.records_replayed == 2  # record 0 and the fork
    assert newer.records_replayed == 0
    assert older.outputs == default.outputs and newer.outputs == []
    with pytest.raises(CoordinatorError) as info:
        repro("counter", Counter, checkpoint=7, home=home)
    assert str(info.value) == "counter has no checkpoint 7 to replay from (kept: 1, 2)"
