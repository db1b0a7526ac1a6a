"""``ambrosia log dump`` in the user's language: method names, senders and decoded
arguments of a real run, from ``--class`` or from the class ``ambrosia run`` recorded."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ambrosia_ic import registry

from ambrosia_cli.calls import describe_call, format_call
from ambrosia_core.wire import Rpc, RpcType
from ambrosia_py import serialization as ser
from ambrosia_py.immortal import POST_METHOD_ID, default_method_id
from samples.hello.hello import Server
from tests.launcher import ROOT, Launcher

pytestmark = pytest.mark.integration

GREET = default_method_id("greet")
NOTE = default_method_id("note")


def _dump(home: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ambrosia_cli", "--home", str(home), "log",
                           "dump", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _records(stdout: str) -> list[str]:
    """The record lines, with their file offsets and lengths left out."""
    return [re.sub(r" @\d+ len \d+:", ":", ln) for ln in stdout.splitlines()
            if ln.startswith("  seq ")]


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """``ambrosia run`` processes in this test's own AMBROSIA_HOME, killed after it."""
    home = tmp_path / "home"
    home.mkdir()
    runs = Launcher(home)
    try:
        yield runs
    finally:
        runs.close()


@pytest.fixture
def hello_run(launcher: Launcher) -> Path:
    """A real run of the hello sample, both processes stopped before they restart (a
    restart would fold the log into a new checkpoint)."""
    server = launcher.start("samples.hello.hello:Server", "hello-server")
    client = launcher.start("samples.hello.hello:Client", "hello-client")
    server.wait_for("server note: the client is done: 2 replies")
    client.kill()
    server.kill()
    return launcher.home


def test_dump_with_class_names_methods_senders_and_arguments(hello_run: Path) -> None:
    r = _dump(hello_run, "-i", "hello-server", "--class", "samples.hello.hello:Server")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines()[1] == (
        "methods, senders and arguments as samples.hello.hello:Server sees them")
    assert _records(r.stdout) == [
        "  seq 0: INITIAL_MESSAGE 33B",
        "  seq 1: greet(name='Ada') rpc call 1 from hello-client 49B"
        "  inputs {'hello-client': 1}",
        "  seq 2: greet(name='Grace') rpc call 2 from hello-client 51B"
        "  inputs {'hello-client': 2}",
        "  seq 3: greet(name='') rpc call 3 from hello-client 46B  inputs {'hello-client': 3}",
        "  seq 4: note(text='the client is done: 2 replies') fork from hello-client 76B"
        "  inputs {'hello-client': 4}",
    ]


def test_the_readmes_dump_excerpt_is_what_the_hello_sample_logs(hello_run: Path) -> None:
    excerpt = [ln for ln in (ROOT / "README.md").read_text().splitlines()
               if ln.startswith("  seq ")]
    r = _dump(hello_run, "-i", "hello-server")
    assert len(excerpt) == 2 and set(excerpt) <= set(r.stdout.splitlines()), r.stdout


def test_dump_uses_the_class_that_ambrosia_run_recorded(hello_run: Path) -> None:
    assert registry.recorded_class("hello-client", 0, hello_run) == (
        "samples.hello.hello:Client", str(ROOT))
    r = _dump(hello_run, "-i", "hello-client")
    assert (r.returncode, r.stderr) == (0, "")
    assert _records(r.stdout)[1:] == [
        "  seq 1: result of call 1 from hello-server: 'Hello, Ada! You are visitor 1.' 72B"
        "  inputs {'hello-server': 1}",
        "  seq 2: result of call 2 from hello-server: 'Hello, Grace! You are visitor 2.' 75B"
        "  inputs {'hello-server': 2}",
        "  seq 3: result of call 3 from hello-server: raised ValueError: a greeting needs a "
        "name 77B  inputs {'hello-server': 3}",
    ]


def test_dump_json_carries_the_decoded_calls(hello_run: Path) -> None:
    r = _dump(hello_run, "-i", "hello-server", "--json")
    assert (r.returncode, r.stderr) == (0, "")
    records = [e for e in map(json.loads, r.stdout.splitlines()) if e["kind"] == "record"]
    assert [e["messages"] for e in records[1:]] == [
        [{"type": "RPC", "method_id": GREET, "rpc_type": "fork", "size": 49, "method": "greet",
          "kind": "rpc", "sender": "hello-client", "call_id": 1, "args": {"name": "Ada"}}],
        [{"type": "RPC", "method_id": GREET, "rpc_type": "fork", "size": 51, "method": "greet",
          "kind": "rpc", "sender": "hello-client", "call_id": 2, "args": {"name": "Grace"}}],
        [{"type": "RPC", "method_id": GREET, "rpc_type": "fork", "size": 46, "method": "greet",
          "kind": "rpc", "sender": "hello-client", "call_id": 3, "args": {"name": ""}}],
        [{"type": "RPC", "method_id": NOTE, "rpc_type": "fork", "size": 76, "method": "note",
          "kind": "fork", "sender": "hello-client",
          "args": {"text": "the client is done: 2 replies"}}],
    ]


def test_the_coordinators_own_dump_shows_method_ids(hello_run: Path) -> None:
    """``python -m ambrosia_ic`` never imports the binding's classes: even with a class
    recorded, its dump shows ids; names are the ``ambrosia`` command's (ambrosia_cli)."""
    r = subprocess.run([sys.executable, "-m", "ambrosia_ic", "--home", str(hello_run), "log",
                        "dump", "-i", "hello-server"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    assert [ln for ln in r.stdout.splitlines() if "sees them" in ln] == []
    assert _records(r.stdout)[1] == (
        f"  seq 1: RPC method {GREET} fork 49B  inputs {{'hello-client': 1}}")
    for args, last in ((["log", "dump", "-i", "hello-server", "--class", "x:Y"],
                        "ambrosia: error: unrecognized arguments: --class x:Y"),
                       (["run", "x:Y", "-i", "z"],
                        "ambrosia: error: argument COMMAND: invalid choice: 'run' (choose from "
                        "'register-instance', 'RegisterInstance', 'add-replica', 'AddReplica', "
                        "'ic', 'debug-instance', 'DebugInstance', 'log', 'raft-cluster', "
                        "'link-secret')")):
        r = subprocess.run([sys.executable, "-m", "ambrosia_ic", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout, r.stderr.splitlines()[-1]) == (2, "", last)


def test_dump_with_a_class_that_lacks_the_methods_shows_ids_and_a_note(hello_run: Path
                                                                        ) -> None:
    r = _dump(hello_run, "-i", "hello-server", "--class", "samples.counter.counter:Counter")
    assert (r.returncode, r.stderr) == (0, "")
    assert _records(r.stdout)[1] == (
        f"  seq 1: RPC method {GREET} fork 49B (Counter publishes no method with id {GREET})"
        "  inputs {'hello-client': 1}")


_ELSEWHERE = """
from ambrosia_py import Immortal, fork, rpc


class Greeter(Immortal):
    @rpc
    async def greet(self, name: str) -> str:
        return name

    @fork
    def note(self, text: str) -> None:
        pass
"""


def test_a_recorded_class_imports_from_where_it_was_run(hello_run: Path, tmp_path: Path
                                                        ) -> None:
    where, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    where.mkdir()
    elsewhere.mkdir()
    (where / "greeter_elsewhere.py").write_text(_ELSEWHERE)
    registry.record_class("hello-server", 0, "greeter_elsewhere:Greeter", where, hello_run)
    r = _dump(hello_run, "-i", "hello-server", cwd=elsewhere)
    assert (r.returncode, r.stderr) == (0, "")
    assert _records(r.stdout)[1] == (
        "  seq 1: greet(name='Ada') rpc call 1 from hello-client 49B"
        "  inputs {'hello-client': 1}")


def test_dump_class_errors_are_one_line(hello_run: Path, tmp_path: Path) -> None:
    r = _dump(hello_run, "-i", "hello-server", "--class", "nosuch.module:X")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.splitlines() == [
        "ambrosia: error: cannot import 'nosuch.module': No module named 'nosuch'"]
    (tmp_path / "broken_module.py").write_text("x = (\n")
    r = _dump(hello_run, "-i", "hello-server", "--class", "broken_module:X", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.splitlines() == [
        "ambrosia: error: cannot import 'broken_module': SyntaxError: '(' was never closed "
        "(broken_module.py, line 1) (`python -c 'import broken_module'` shows the traceback)"]
    # A recorded class that no longer imports: said once, and the dump goes on with ids.
    registry.record_class("hello-server", 0, "gone_module:Server", tmp_path, hello_run)
    r = _dump(hello_run, "-i", "hello-server", cwd=tmp_path)
    assert r.returncode == 0
    assert r.stderr.splitlines() == [
        "ambrosia log dump: note: showing method ids: the recorded class cannot be used: "
        "cannot import 'gone_module': No module named 'gone_module'"]
    assert _records(r.stdout)[1] == (
        f"  seq 1: RPC method {GREET} fork 49B  inputs {{'hello-client': 1}}")


# ------------------------------------------------------------------ AmbrosiaJS forms


def _describe(method_id: int, args: bytes, rpc_type: int = RpcType.FORK) -> str:
    m: dict[str, Any] = {"type": "RPC", "method_id": method_id,
                         "rpc_type": ("async", "fork", "impulse")[rpc_type], "size": len(args)}
    m.update(describe_call(Server, Rpc(method_id, rpc_type, args)))
    return format_call(m)


def test_js_argument_forms_posts_and_post_results_decode() -> None:
    assert _describe(GREET, ser.encode_json_args({"name": "Ada"})) == (
        "greet(name='Ada') rpc 14B")
    assert _describe(NOTE, ser.encode_raw_args(b"\x00\x01"), RpcType.IMPULSE) == (
        "note(text=b'\\x00\\x01') impulse 3B")
    post = ser.encode_json_args({"senderInstanceName": "js", "destinationInstanceName": "s",
                                 "methodName": "greet", "methodVersion": 1, "callID": 7,
                                 "arg:name": "Grace"})
    assert _describe(POST_METHOD_ID, post) == (
        f"greet(name='Grace') post call 7 from js {len(post)}B")
    result = ser.encode_json_args({"senderInstanceName": "js", "methodName": "hi_Result",
                                   "callID": 3, "result": [1, 2]})
    assert _describe(POST_METHOD_ID, result) == (
        f"post result of call 3 from js: [1, 2] {len(result)}B")
    unknown = ser.encode_json_args({"senderInstanceName": "js", "methodName": "shout",
                                    "callID": 4, "arg:x": 1})
    assert _describe(POST_METHOD_ID, unknown) == (
        f"shout(x=1) post call 4 from js {len(unknown)}B (Server publishes no method "
        "'shout')")
    extra = ser.Envelope(1, 2, -1, "me", [["a", "b"], {}]).encode()
    assert _describe(NOTE, extra) == (
        "note(text='a', #1='b') fork from me 14B (more positional arguments than note takes)")
    wrong = ser.Envelope(1, 2, -1, "me", [[], {"zz": 1}]).encode()
    assert _describe(NOTE, wrong) == (
        "note(zz=1) fork from me 14B (the arguments do not fit note: missing a required "
        "argument: 'text')")
    assert _describe(GREET, b"\x01junk") == (
        f"RPC method {GREET} fork 5B (the arguments do not decode: arguments of greet are in "
        "no known form)")


def test_a_class_record_that_cannot_be_written_does_not_stop_the_run(launcher: Launcher
                                                                     ) -> None:
    (launcher.home / "classes").write_text("a file where the directory would go")
    p = launcher.start("samples.counter.counter:Counter", "counter")
    p.wait_for("count is 1")
    line = p.wait_for("was not recorded")
    record = launcher.home / "classes" / "counter.json"
    assert line.split(": ", 1)[1] == (
        "the class was not recorded for `ambrosia log dump` (give it --class): cannot read "
        f"{record}: Not a directory")
    p.kill()
    # The dump says so in one line too, and goes on with method ids.
    r = _dump(launcher.home, "-i", "counter")
    assert r.returncode == 0
    assert r.stderr.splitlines() == [
        "ambrosia log dump: note: showing method ids: the recorded class cannot be used: "
        f"cannot read {record}: Not a directory"]
    assert _records(r.stdout)[1] == (
        f"  seq 1: RPC method {default_method_id('increment')} fork 41B"
        "  inputs {'counter': 1}")


def test_a_live_upgrade_records_each_versions_class(launcher: Launcher) -> None:
    p = launcher.start("samples.upgrade.v1:GuestBook", "guests")
    p.wait_for("(3 signatures)")
    p.kill()
    # ambrosia run registered version 1 (v1's class version); --upgrade-to registers 2.
    p = launcher.start("samples.upgrade.v1:GuestBook", "guests",
                       args=["--upgrade-to", "samples.upgrade.v2:GuestBook"])
    p.wait_for("upgraded to GuestBook version 2")
    p.kill()
    assert [registry.recorded_class("guests", v, launcher.home) for v in (1, 2)] == [
        ("samples.upgrade.v1:GuestBook", str(ROOT)), ("samples.upgrade.v2:GuestBook", str(ROOT))]
    r = _dump(launcher.home, "-i", "guests", "--current-version", "1")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines()[1] == (
        "methods, senders and arguments as samples.upgrade.v1:GuestBook sees them")
    # The three self-calls may share a record (one group commit): one message each.
    messages = [m for ln in _records(r.stdout)[1:]
                for m in ln.split(": ", 1)[1].split("  inputs ")[0].split("; ")]
    assert messages == ["sign(name='ada') fork from guests 43B",
                        "sign(name='grace') fork from guests 45B",
                        "sign(name='ada') fork from guests 43B"]
