"""The ambrosia command line: registration, errors as one line, the registry on disk."""

from __future__ import annotations

import contextlib
import json

import attrs
from ambrosia_ic import registry
from ambrosia_ic.errors import RegistryError

from ambrosia_core.ports import free_ports

from .conftest import Harness


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


def _one_line_error(r, code: int) -> str:  # type: ignore[no-untyped-def]
    """The exit code (2 for arguments, 1 for the rest) and the one line on stderr."""
    assert r.returncode == code, r.stderr
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_argument_and_registration_errors_are_one_line(harness: Harness) -> None:
    line = _one_line_error(harness.cli("register-instance", "-i", "x", "-rp", "1"), 2)
    assert line == ("ambrosia register-instance: error: the following arguments are required: "
                    "-sp/--send-port, -p/--ic-port, -l/--log-dir ('x' is not registered yet)")
    line = _one_line_error(harness.cli("register-instance", "-i", "x", "-rp", "5000", "-sp",
                                       "5000", "-p", "5001", "-l", "logs"), 1)
    assert line == ("ambrosia: error: receive port, send port and ic port must be three "
                    "different ports, got receive port 5000, send port 5000, ic port 5001")
    line = _one_line_error(harness.cli("register-instance", "-i", "../evil", "-rp", "5000",
                                       "-sp", "5002", "-p", "5001", "-l", "logs"), 1)
    assert line.startswith("ambrosia: error: instance name '../evil' is not allowed: ")
    line = _one_line_error(harness.cli("register-instance", "-i", "x", "-rp", "5000", "-sp",
                                       "5002", "-p", "5001", "-l", "logs", "-cs", "maybe"), 2)
    assert line == ("ambrosia register-instance: error: argument -cs/--create-service/"
                    "--createService: 'maybe' is not one of auto, no-recovery, always-recover "
                    "(or A, N, Y)")
    # None of the refusals registered anything.
    assert not (harness.home / "instances").exists() or not any(
        (harness.home / "instances").iterdir())
    line = _one_line_error(harness.cli("ic", "--instance-name", "nobody"), 1)
    assert line == (f"ambrosia: error: instance 'nobody' is not registered in {harness.home} "
                    "(run `ambrosia register-instance` first)")
    (harness.home / "instances").mkdir(parents=True, exist_ok=True)
    (harness.home / "instances" / "broken.json").write_text("{not json")
    line = _one_line_error(harness.cli("ic", "-i", "broken"), 1)
    assert line.startswith("ambrosia: error: ")
    assert "broken.json" in line and "not valid JSON" in line


def test_create_service_modes(harness: Harness) -> None:
    harness.register("fresh", create_service="always-recover")
    idir = harness.instance_dir("fresh")
    line = _one_line_error(harness.cli("ic", "-i", "fresh"), 1)
    assert line == (f"ambrosia: error: fresh: --create-service always-recover, but {idir} "
                    "holds no checkpoint to recover from")
    assert [p.name for p in idir.iterdir()] == ["serverlock"]  # no log, no checkpoint


def test_run_hands_every_argument_to_the_runtime(harness: Harness) -> None:
    r = harness.cli("run", "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: ambrosia run" in r.stdout and "MODULE:CLASS" in r.stdout
    line = _one_line_error(harness.cli("run", "-i", "x"), 2)
    assert line == "ambrosia run: error: the following arguments are required: MODULE:CLASS"


def test_log_dump_shows_records_and_checkpoints(harness: Harness) -> None:
    from tests.launcher import wait_until

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
    # The version's directory is chosen as debug-instance chooses it (-cv), or with -v.
    for choose in (["-cv", "0"], ["--currentVersion", "0"], ["-v", "0"]):
        assert harness.cli("log", "dump", "-i", "alpha", *choose).stdout == r.stdout
    other = harness.cli("log", "dump", "-i", "alpha", "--current-version", "7")
    assert other.returncode == 1 and "alpha_7 at offset 0: no such directory" in other.stdout
    j = [json.loads(x) for x in harness.cli("log", "dump", "-i", "alpha", "--json").stdout
         .splitlines()]
    records = [e for e in j if e["kind"] == "record"]
    assert [e["seq_id"] for e in records] == list(range(len(d.records)))
    first_call = next(e for e in records if e["messages"][0].get("method_id") == 1)
    assert first_call["inputs"] == {"alpha": 1}  # the watermark of the first self-call


def test_ports_registered_to_another_instance_are_refused(harness: Harness) -> None:
    a_rp, a_sp, a_ip, b_rp, b_sp, b_ip, r_rp, r_sp, r_ip = free_ports(9)
    logs = str(harness.logs)

    def register(name: str, rp: int, sp: int, ip: int, *extra: str):  # type: ignore[no-untyped-def]
        return harness.cli("register-instance", "-i", name, "-rp", str(rp), "-sp", str(sp),
                           "-p", str(ip), "-l", logs, *extra)

    assert register("a", a_rp, a_sp, a_ip, "--active-active").returncode == 0
    r = harness.cli("add-replica", "-i", "a", "-r", "1", "-rp", str(r_rp), "-sp", str(r_sp),
                    "-p", str(r_ip))
    assert r.returncode == 0, r.stderr
    # Any of b's three ports equal to any of a's (or of a's replica) is refused.
    for (rp, sp, ip), mine, port, theirs in (
            ((a_rp, b_sp, b_ip), "receive port", a_rp, "instance 'a' (its receive port)"),
            ((b_rp, a_ip, b_ip), "send port", a_ip, "instance 'a' (its ic port)"),
            ((b_rp, b_sp, a_sp), "ic port", a_sp, "instance 'a' (its send port)"),
            ((b_rp, b_sp, r_sp), "ic port", r_sp, "replica 1 of 'a' (its send port)")):
        line = _one_line_error(register("b", rp, sp, ip), 1)
        assert line == (f"ambrosia: error: {mine} {port} is already registered to {theirs}; "
                        "every instance and replica needs ports of its own")
    assert not (harness.home / "instances" / "b.json").exists()
    # A replica may not take another instance's port, nor another replica's.
    assert register("b", b_rp, b_sp, b_ip).returncode == 0
    line = _one_line_error(harness.cli("add-replica", "-i", "a", "-r", "2", "-rp", str(b_ip),
                                       "-sp", str(a_rp + 1), "-p", str(r_ip)), 1)
    assert line == (f"ambrosia: error: receive port {b_ip} is already registered to "
                    "instance 'b' (its ic port); every instance and replica needs ports of "
                    "its own")
    line = _one_line_error(harness.cli("add-replica", "-i", "a", "-r", "2", "-rp", str(a_rp + 2),
                                       "-sp", str(a_rp + 1), "-p", str(r_ip)), 1)
    assert line == (f"ambrosia: error: ic port {r_ip} is already registered to replica 1 of "
                    "'a' (its ic port); every instance and replica needs ports of its own")
    # Re-registering an instance (or a replica) with its own ports, even shuffled, is fine.
    assert register("b", b_ip, b_rp, b_sp).returncode == 0
    assert register("a", a_rp, a_sp, a_ip, "--active-active").returncode == 0
    r = harness.cli("add-replica", "-i", "a", "-r", "1", "-rp", str(r_rp), "-sp", str(r_sp),
                    "-p", str(r_ip))
    assert r.returncode == 0, r.stderr
    # Within one registration, the three ports must differ (as before).
    line = _one_line_error(register("c", a_rp + 3, a_rp + 3, a_rp + 4), 1)
    assert line.startswith("ambrosia: error: receive port, send port and ic port must be three")



def test_register_instance_updates_a_registration_in_place(harness: Harness) -> None:
    rp, sp, ip = free_ports(3)
    r = harness.cli("register-instance", "-i", "svc", "-rp", str(rp), "-sp", str(sp), "-p",
                    str(ip), "-l", str(harness.logs), "-cv", "1", "-lts", "7", "-cs", "N")
    assert r.returncode == 0, r.stderr
    first = registry.load("svc", harness.home)

    def update(*args: str) -> registry.Registration:
        r = harness.cli("register-instance", "-i", "svc", *args)
        assert (r.returncode, r.stderr) == (0, "")
        return registry.load("svc", harness.home)

    # Only the upgrade version changes; the ports, log dir, flags and committer id stay.
    reg = update("--upgrade-version", "2")
    assert reg == attrs.evolve(first, upgrade_version=2)
    # Changing something else keeps the pending upgrade.
    reg = update("-lts", "9")
    assert reg == attrs.evolve(first, upgrade_version=2, log_trigger_size_mb=9)
    # A new current version alone means no upgrade is pending any more.
    reg = update("-cv", "2")
    assert reg == attrs.evolve(first, current_version=2, upgrade_version=2,
                               log_trigger_size_mb=9)
    # Moving the ports is still possible, one at a time.
    new_rp = free_ports(1)[0]
    reg = update("-rp", str(new_rp))
    assert (reg.receive_port, reg.send_port, reg.ic_port) == (new_rp, sp, ip)
    # An upgrade below the current version is refused, and the registration kept.
    line = _one_line_error(harness.cli("register-instance", "-i", "svc", "-uv", "1"), 1)
    assert line == "ambrosia: error: upgrade version 1 is below current version 2"
    assert registry.load("svc", harness.home) == reg


def test_the_event_loop_and_fsync_place_are_not_settings(harness: Harness) -> None:
    """One default each (uvloop; the fsync on the loop, in a thread for replicas): the
    options that chose them are refused in one line."""
    harness.register("alpha")
    for option in ("--loop", "--fsync"):
        r = harness.cli("ic", "-i", "alpha", option, "thread")
        assert f"unrecognized arguments: {option} thread" in _one_line_error(r, 2)


def test_every_flipped_bit_of_a_registration_is_refused_in_one_line(harness: Harness) -> None:
    """A registration is JSON: most flips in it still parse, as another port, committer id
    or log directory. Its check bytes refuse every one of them, naming the file."""
    harness.register("flip")
    path = harness.home / "instances" / "flip.json"
    good = path.read_bytes()
    assert registry.load("flip", harness.home) == harness.reg("flip")
    parsed = 0
    for i in range(len(good)):
        for bit in range(8):
            bad = bytearray(good)
            bad[i] ^= 1 << bit
            path.write_bytes(bytes(bad))
            try:
                registry.load("flip", harness.home)
            except RegistryError as err:
                assert str(path) in str(err) and "\n" not in str(err)
            else:
                raise AssertionError(f"bit {bit} of byte {i} flipped reads as valid")
            with contextlib.suppress(ValueError):
                json.loads(bytes(bad))
                parsed += 1
    assert parsed > len(good)  # many flips were still valid JSON: the check refused them
    path.write_bytes(good)
    # A registration from before check bytes is read as it is.
    old = json.loads(good)
    del old["check"]
    path.write_text(json.dumps(old))
    assert registry.load("flip", harness.home) == harness.reg("flip")
