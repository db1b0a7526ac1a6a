"""The ambrosia command line: registration, errors as one line, the registry on disk."""

from __future__ import annotations

import json

from ambrosia_ic import registry

from .conftest import Harness, free_ports


def test_register_instance_with_the_real_tools_short_forms(harness: Harness) -> None:
    rp, sp, ip = free_ports(3)
    r = harness.cli("register-instance", "-i", "svc", "-rp", str(rp), "-sp", str(sp),
                    "--ic-port", str(ip), "-l", str(harness.logs), "-cv", "2", "-uv", "3",
                    "-lts", "5", "-cs", "Y")
    assert r.returncode == 0, r.stderr
    reg = registry.load("svc", harness.home)
    assert (reg.receive_port, reg.send_port, reg.ic_port) == (rp, sp, ip)
    assert (reg.current_version, reg.upgrade_version) == (2, 3)
    assert reg.log_trigger_size_mb == 5 and reg.create_service == "always-recover"
    assert registry.instance_dir(reg) == harness.logs / "svc_2"
    data = json.loads((harness.home / "instances" / "svc.json").read_text())
    assert data["committer_id"] == reg.committer_id
    # Registering again keeps the committer id (the log's records carry it).
    r = harness.cli("register-instance", "--instance-name", "svc", "--receive-port", str(rp),
                    "--send-port", str(sp), "--ic-port", str(ip), "--log-dir",
                    str(harness.logs))
    assert r.returncode == 0
    assert registry.load("svc", harness.home).committer_id == reg.committer_id
    assert (harness.home / "link-secret").stat().st_mode & 0o077 == 0


def _one_line_error(r) -> str:  # type: ignore[no-untyped-def]
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_argument_and_registration_errors_are_one_line(harness: Harness) -> None:
    line = _one_line_error(harness.cli("register-instance", "-i", "x", "-rp", "1"))
    assert "required" in line
    line = _one_line_error(harness.cli("register-instance", "-i", "x", "-rp", "5000", "-sp",
                                       "5000", "-p", "5001", "-l", "logs"))
    assert "three different ports" in line
    line = _one_line_error(harness.cli("register-instance", "-i", "../evil", "-rp", "5000",
                                       "-sp", "5002", "-p", "5001", "-l", "logs"))
    assert "not allowed" in line
    line = _one_line_error(harness.cli("register-instance", "-i", "x", "-rp", "5000", "-sp",
                                       "5002", "-p", "5001", "-l", "logs", "-cs", "maybe"))
    assert "create-service" in line or "maybe" in line
    line = _one_line_error(harness.cli("ic", "--instance-name", "nobody"))
    assert "'nobody' is not registered" in line
    (harness.home / "instances").mkdir(parents=True, exist_ok=True)
    (harness.home / "instances" / "broken.json").write_text("{not json")
    line = _one_line_error(harness.cli("ic", "-i", "broken"))
    assert "broken.json" in line and "not valid JSON" in line


def test_create_service_modes(harness: Harness) -> None:
    harness.register("fresh", create_service="always-recover")
    line = _one_line_error(harness.cli("ic", "-i", "fresh"))
    assert "nothing" in line or "no checkpoint" in line


def test_run_hands_every_argument_to_the_runtime(harness: Harness) -> None:
    r = harness.cli("run", "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: ambrosia run" in r.stdout and "MODULE:CLASS" in r.stdout
    r = harness.cli("run", "-i", "x")
    assert r.returncode != 0 and "MODULE:CLASS" in r.stderr and "Traceback" not in r.stderr


def test_log_dump_shows_records_and_checkpoints(harness: Harness) -> None:
    from .conftest import wait_until
    from .test_first_start import _run_chain

    harness.register("alpha")
    harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 2)
    r = harness.cli("log", "dump", "-i", "alpha")
    assert r.returncode == 0, r.stderr
    assert "checkpoint 1" in r.stdout
    assert "seq 0 @0" in r.stdout and "INITIAL_MESSAGE" in r.stdout
    assert "RPC method 5 impulse" in r.stdout and "RPC method 1 fork" in r.stdout
    j = [json.loads(x) for x in harness.cli("log", "dump", "-i", "alpha", "--json").stdout
         .splitlines()]
    records = [e for e in j if e["kind"] == "record"]
    assert [e["seq_id"] for e in records] == list(range(len(d.records)))
    first_call = next(e for e in records if e["messages"][0].get("method_id") == 1)
    assert first_call["inputs"] == {"alpha": 1}  # the watermark of the first self-call
