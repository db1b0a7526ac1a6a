"""Each sample run as a user would: `ambrosia run` processes, kill -9, debug-instance."""

from __future__ import annotations

import subprocess
import sys

import attrs
import pytest

from ambrosia_py.testing import repro, upgrade_test
from samples.counter.counter import Counter
from samples.hello.hello import Client, Server
from samples.upgrade import v1, v2
from tests.launcher import ROOT, Launcher, wait_until

pytestmark = pytest.mark.integration


def test_hello_client_and_server(launcher: Launcher) -> None:
    server = launcher.start("samples.hello.hello:Server", "hello-server")
    client = launcher.start("samples.hello.hello:Client", "hello-client")
    server.wait_for("server note: the client is done: 2 replies")
    client.stop()
    server.stop()
    c = repro("hello-client", Client, home=launcher.home).state
    assert c.replies == ["Hello, Ada! You are visitor 1.", "Hello, Grace! You are visitor 2."]
    assert c.errors == ["a greeting needs a name"]  # the server's ValueError, re-raised
    s = repro("hello-server", Server, home=launcher.home).state
    assert s.greeted == ["Ada", "Grace"] and len(s.notes) == 1


def test_counter_survives_kill_9_exactly_once(launcher: Launcher) -> None:
    p = launcher.start("samples.counter.counter:Counter", "counter")
    p.wait_for("first start: running on_first_start")
    p.kill()
    for _ in range(2):
        p = launcher.start("samples.counter.counter:Counter", "counter")
        p.kill()
    p = launcher.start("samples.counter.counter:Counter", "counter")
    p.wait_for("count is 1")  # replayed from the log, or regenerated and logged now
    p.stop()
    assert not any("count is 2" in line for line in p.lines)
    state = repro("counter", Counter, home=launcher.home).state
    assert state.count == 1 and state.applied == [1]


def test_upgrade_v1_to_v2_as_an_upgrade_test(launcher: Launcher) -> None:
    p = launcher.start("samples.upgrade.v1:GuestBook", "guests")
    p.wait_for("(3 signatures)")
    p.stop()
    assert repro("guests", v1.GuestBook, home=launcher.home).state.names == [
        "ada", "grace", "ada"]
    result = upgrade_test("guests", v1.GuestBook, v2.GuestBook, home=launcher.home)
    assert isinstance(result.state, v2.GuestBook)
    # The checkpoint was taken before any signature; v2 replays all three.
    assert result.state.counts == {"Ada": 2, "Grace": 1}
    custom = upgrade_test("guests", v1.GuestBook, v2.GuestBook,
                          convert=lambda old: v2.GuestBook(), home=launcher.home)
    assert custom.state.counts == {"Ada": 2, "Grace": 1}


@pytest.mark.slow
def test_demo_runs_and_checks_exactly_once() -> None:
    out = subprocess.run([sys.executable, "samples/demo/run_demo.py", "200"], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "demo: 200 requests, 200 applied exactly once, in order" in out.stdout


def test_upgrade_v1_to_v2_live_with_one_command(launcher: Launcher) -> None:
    from ambrosia_ic import registry

    p = launcher.start("samples.upgrade.v1:GuestBook", "guests")
    p.wait_for("(3 signatures)")
    p.stop()
    # The registry counts versions as the classes do: v1.GuestBook.version is 1.
    before = registry.load("guests", launcher.home)
    assert (before.current_version, before.upgrade_version) == (v1.GuestBook.version, 1)
    p = launcher.start("samples.upgrade.v1:GuestBook", "guests",
                       args=["--upgrade-to", "samples.upgrade.v2:GuestBook"])
    assert "(live)" in p.wait_for("upgraded to GuestBook version 2")
    assert any("registered the upgrade of guests from version 1 to version 2" in line
               for line in p.lines)
    # The coordinator records the new version once the upgraded checkpoint is durable.
    wait_until(lambda: registry.load("guests", launcher.home).current_version == 2,
               "version 2 registered")
    p.stop()
    after = registry.load("guests", launcher.home)
    assert (after.receive_port, after.send_port, after.ic_port, after.upgrade_version) == (
        before.receive_port, before.send_port, before.ic_port, 2)
    assert registry.instance_dir(after).name == "guests_2"
    p = launcher.start("samples.upgrade.v2:GuestBook", "guests")  # now plain v2
    p.stop()
    state = repro("guests", v2.GuestBook, home=launcher.home).state
    assert state.counts == {"Ada": 2, "Grace": 1}


def test_upgrade_v1_to_v2_live_with_register_instance_and_a_restart(
        launcher: Launcher) -> None:
    from ambrosia_ic import registry

    p = launcher.start("samples.upgrade.v1:GuestBook", "guests")
    p.wait_for("(3 signatures)")
    p.stop()
    before = registry.load("guests", launcher.home)
    # Only the name and the new version: the ports `run` chose stay as registered.
    out = subprocess.run(
        [sys.executable, "-m", "ambrosia_cli", "--home", str(launcher.home), "register-instance",
         "-i", "guests", "--upgrade-version", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("version 1, upgrading to 2 at its next start\n")
    mid = registry.load("guests", launcher.home)
    assert mid == attrs.evolve(before, upgrade_version=2)
    p = launcher.start("samples.upgrade.v1:GuestBook", "guests",
                       args=["--upgrade-to", "samples.upgrade.v2:GuestBook"])
    assert "(live)" in p.wait_for("upgraded to GuestBook version 2")
    assert not any("registered the upgrade" in line for line in p.lines)  # done already
    wait_until(lambda: registry.load("guests", launcher.home).current_version == 2,
               "version 2 registered")
    p.stop()
    p = launcher.start("samples.upgrade.v2:GuestBook", "guests")
    p.stop()
    state = repro("guests", v2.GuestBook, home=launcher.home).state
    assert state.counts == {"Ada": 2, "Grace": 1}
