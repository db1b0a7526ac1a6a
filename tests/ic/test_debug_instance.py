"""debug-instance: the repro and upgrade-test flows, and the determinism check."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ambrosia_core.wire import OutgoingRpc, Rpc
from tests.launcher import wait_until

from .conftest import Harness
from .rawbinding import CounterApp, Driver, RawBinding
from .test_first_start import _run_chain


class DriftingApp(CounterApp):
    """Acknowledges ``alpha:3`` differently: a nondeterministic change of behaviour."""

    def on_message(self, m: Any) -> list[OutgoingRpc]:
        out = super().on_message(m)
        if isinstance(m, Rpc) and m.method_id == 1 and m.args == b"alpha:3":
            out = [o._replace(args=b"ack:alpha:3 but different") for o in out]
        return out


def _recorded_run(harness: Harness) -> Driver:
    harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 6)
    harness.kill9(proc)  # frees the ports; the files stay as the run left them
    d1.thread.join(30)
    return d1


def _debug(harness: Harness, app: CounterApp, *args: str) -> tuple[Driver, subprocess.Popen[str]]:
    proc = harness.popen("debug-instance", "--instance-name", "alpha", *args)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("ambrosia-ic ready: instance=alpha"), ready
    reg = harness.reg("alpha")
    b = RawBinding(reg.receive_port, reg.send_port)
    harness.bindings.append(b)
    return Driver(b, app).start(), proc


def test_repro_replays_every_record_and_outputs_match(harness: Harness) -> None:
    d1 = _recorded_run(harness)
    d, proc = _debug(harness, CounterApp("alpha"), "--checkpoint", "1", "--json")
    wait_until(lambda: len(d.records) == len(d1.records), "the whole log replayed")
    assert d.records == d1.records
    assert d.events == ["checkpoint-loaded"]  # no TakeBecomingPrimaryCheckpoint, no BecomingPrimary
    assert d.snapshot() == d1.snapshot()
    d.b.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "ok"
    assert summary["records_replayed"] == len(d1.records)
    assert summary["first_divergence_seq"] is None
    assert summary["outputs"] == summary["recorded_outputs"] == 12
    # Nothing was persisted: a normal recovery afterwards sees the same files.
    harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary")
    assert d2.records == d1.records


def test_repro_reports_the_first_divergent_sequence_id(harness: Harness) -> None:
    d1 = _recorded_run(harness)
    culprit = next(r.seq_id for r in d1.parsed
                   if any(isinstance(m, Rpc) and m.args == b"alpha:3" for m in r.messages))
    d, proc = _debug(harness, DriftingApp("alpha"), "-c", "1", "--json")
    wait_until(lambda: len(d.records) == len(d1.records), "the whole log replayed")
    d.b.close()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "diverged"
    assert summary["first_divergence_seq"] == culprit
    assert f"sequence id {culprit}" in summary["detail"]


def test_upgrade_test_sends_upgrade_service_before_the_replay(harness: Harness) -> None:
    d1 = _recorded_run(harness)
    d, proc = _debug(harness, CounterApp("alpha"), "-c", "1", "-cv", "0", "--testing-upgrade",
                     "--idle-timeout", "2")
    wait_until(lambda: len(d.records) == len(d1.records), "the whole log replayed")
    assert d.events == ["checkpoint-loaded", "upgrade-service"]
    assert d.marks["upgrade-service"] == 0
    out, _ = proc.communicate(timeout=60)  # ends by itself once the binding is quiet
    assert proc.returncode == 0
    line = out.strip().splitlines()[-1]
    assert line == (f"debug-instance alpha checkpoint 1: replayed {len(d1.records)} records, "
                    "12 outputs; the outputs match the recorded run")


def test_debug_instance_of_a_missing_checkpoint_is_one_line(harness: Harness) -> None:
    _recorded_run(harness)
    r = harness.cli("debug-instance", "-i", "alpha", "-c", "7", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["status"] == "error"
    path = harness.instance_dir("alpha") / "serverchkpt7"
    assert r.stderr == f"ambrosia: error: {path}: no such checkpoint (kept: 1)\n"
