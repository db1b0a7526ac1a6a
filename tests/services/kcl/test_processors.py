"""Record processors as real child processes of a real coordinator: amazon-kclpy's own
sample, the sample of samples/kcl (amazon-kclpy's API, exactly once by sequence number)
with the child and the coordinator killed mid-batch, a processor on amazon-kclpy 1.x
(the older protocol),
and an unruly child."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from ambrosia_services.connectors import EosMessage
from ambrosia_services.kcl import KclCoordinator
from ambrosia_services.staging import segment_names

from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, repro, upgrade_test
from tests.launcher import ROOT, Launcher, wait_until
from tests.services.connectors.coordinator.peers import Source, lines

from .versions import KclCoordinatorV1, KclCoordinatorV2

pytestmark = pytest.mark.integration

TARGET = "ambrosia_services.kcl:KclCoordinator"
CHILDREN = Path(__file__).with_name("children.py")
V1 = Path(__file__).with_name("kclpy_v1.py")
VERSIONS = "tests.services.kcl.versions:KclCoordinator"


def start(launcher: Launcher, tmp_path: Path, port: int, processors: dict[str, str],
          top: str = "") -> ImmortalProcess:
    cfg = tmp_path / "coord.toml"
    if not cfg.exists():
        text = f'listen = "127.0.0.1:{port}"\n{top}'
        for name, body in processors.items():
            text += f"[kcl.{name}]\n{body}\n"
        cfg.write_text(text)
    p = launcher.start(TARGET, "coord", args=["--config", str(cfg)])
    p.wait_for("listening for sources")
    return p


def command(*args: object) -> str:
    return "command = " + json.dumps([sys.executable, *map(str, args)])


def feed(port: int, sid: int, name: str, ids: range, *, eos: bool) -> None:
    src = Source(port)
    src.hello()
    src.notify(sid, name)
    src.send(*lines(sid, ids))
    src.wait_acked(sid, ids[-1])
    if eos:
        src.send(EosMessage(sid))
    src.close()


def written(path: Path) -> list[int]:
    return [int(line.split(" ", 1)[0]) for line in path.read_text().splitlines()]


def test_amazon_kclpy_sample_processor(launcher: Launcher, tmp_path: Path,
                                       kclpy: Path) -> None:
    (port,) = free_ports(1)
    sample = kclpy / "samples" / "sample_kclpy_app.py"
    # Unbuffered: the sample writes its lines without a newline; each must come whole.
    env = f'env = {{ PYTHONPATH = "{kclpy}", PYTHONUNBUFFERED = "1" }}'
    p = start(launcher, tmp_path, port, {"ended": f"{command(sample)}\n{env}",
                                         "held": f"{command(sample)}\n{env}"})
    feed(port, 1, "ended", range(1, 31), eos=True)
    feed(port, 2, "held", range(1, 11), eos=False)
    p.wait_for("at the end of the stream")  # the sample's checkpoint at shardEnded
    p.wait_for("kcl held: checkpoint at 10 recorded")
    # Written with no newline: logged once it waited 0.5 s for its end, or the stderr ended.
    p.wait_for("Shard has ended checkpointing")
    p.stop()  # shutdownRequested: its checkpoint is recorded, the log still open
    log = "\n".join(p.lines)
    assert "Shard has ended checkpointing" in log
    assert "Shutdown has been requested, checkpointing." in log
    assert "ShutdownException" not in log
    seen = [int(s) for s in re.findall(r"Sequence Number: (\d+),", log)]
    assert sorted(seen) == sorted([*range(1, 31), *range(1, 11)])  # each once, each stream
    state = repro("coord", KclCoordinator, home=launcher.home).state.kcl
    ended, held = state.streams[1], state.streams[2]
    # The sample checkpoints its first batch, then every 30 s, and at the shard's end.
    assert (ended.checkpoint, ended.finished, ended.records) == (30, True, [])
    assert held.checkpoint == 10 and held.records == [] and not held.finished
    assert held.checkpoints == 2  # its first batch's, and its stop's


def coordinator_pid(p: ImmortalProcess) -> int:
    line = p.wait_for("started the coordinator (pid")
    return int(line.rsplit("pid ", 1)[1].rstrip(")"))


def processor_pid(p: ImmortalProcess, count: int) -> int:
    line = p.wait_for("started processor (pid", count=count)
    return int(line.split("(pid ", 1)[1].split(")", 1)[0])


@pytest.mark.slow
@pytest.mark.parametrize("staged", [False, pytest.param(True, marks=pytest.mark.chaos)],
                         ids=["in-state", "staged"])  # staged: `make chaos`
def test_child_and_coordinator_killed_mid_batch_lose_nothing(
        launcher: Launcher, tmp_path: Path, kclpy: Path, staged: bool) -> None:
    """Also with a staging root: the state then keeps references to staged blocks (with
    each message's id and key), the driver reads the records from the segments, and a
    block's segment goes once checkpoints cover it."""
    (port,) = free_ports(1)
    out = tmp_path / "out.txt"
    root = tmp_path / "staging"
    body = (f'{command(ROOT / "samples" / "kcl" / "processor.py", out, "--delay", 0.01)}\n'
            f'env = {{ PYTHONPATH = "{kclpy}" }}\nbatch_records = 25\n')
    top = f'staging = "{root}"\n' if staged else ""
    p = start(launcher, tmp_path, port, {"orders": body}, top)
    feed(port, 7, "orders", range(1, 301), eos=False)
    wait_until(lambda: out.exists() and len(written(out)) >= 40, "40 lines written", 30)
    os.kill(processor_pid(p, 1), signal.SIGKILL)  # the child, mid-batch
    line = p.wait_for("started processor (pid", count=2)
    assert not line.endswith("at checkpoint none")  # from the last recorded checkpoint
    wait_until(lambda: len(written(out)) >= 120, "120 lines written", 30)
    p.kill()  # the coordinator (binding and log), mid-batch; the child dies with it
    mid = repro("coord", KclCoordinator, home=launcher.home).state.kcl.streams[7]
    assert mid.checkpoint < 300
    if staged:  # references to what is not checkpointed yet, no record in the state
        assert mid.records == [] and mid.blocks
        assert mid.blocks[-1].ref.last_id == 300 and mid.blocks[0].ref.last_id > mid.checkpoint
    else:
        assert [r.sequence for r in mid.records] == list(range(mid.checkpoint + 1, 301))
    p = start(launcher, tmp_path, port, {})
    resumed = p.wait_for("started processor (pid")
    assert int(resumed.rsplit(" ", 1)[1]) >= 100
    told = p.wait_for("processor: shard orders from checkpoint")  # initialize's number
    assert told.split("from checkpoint ")[1].startswith(resumed.rsplit(" ", 1)[1] + ",")
    wait_until(lambda: len(written(out)) >= 200, "200 lines written", 30)
    os.kill(coordinator_pid(p), signal.SIGKILL)  # the log alone: the binding stops
    assert p.proc.wait(30) != 0
    p.kill()  # joins the log reader
    # The stream moves to the next primary: the batch under way may finish (its
    # checkpoint refused, the log being gone), then leaseLost.
    assert any("the coordinator is gone: leaseLost to the processor" in line
               for line in p.lines), p.lines[-10:]
    assert any("processor: lease lost" in line for line in p.lines), p.lines[-10:]
    p = start(launcher, tmp_path, port, {})
    feed(port, 7, "orders", range(301, 321), eos=True)
    p.wait_for("processor: stream ended at 320")
    assert written(out) == list(range(1, 321))  # every record once, in order
    assert json.loads(out.read_text().splitlines()[0].split(" ", 1)[1]) == "s7 line 1\n"
    if staged:  # every block was let go: no segment is left but the one being written
        wait_until(lambda: len(segment_names(root)) <= 1, "segments deleted", 30)
    p.stop()
    rec = repro("coord", KclCoordinator, home=launcher.home).state.kcl.streams[7]
    assert (rec.checkpoint, rec.finished, rec.records, rec.blocks) == (320, True, [], [])


# `make chaos`: a live upgrade while a feed streams stays in make test in the connector
# coordinator's test_lifecycle, the KCL state carried whole with records kept for the
# processor in tests/immortal/test_upgrade_rule, kill -9 of the child and the coordinator
# mid-batch above, and a crash between any two steps of a live upgrade in the simulation.
@pytest.mark.chaos
@pytest.mark.slow
def test_live_upgrades_mid_batch_and_a_kill_during_one_lose_nothing(
        launcher: Launcher, tmp_path: Path, kclpy: Path) -> None:
    """Version 0 -> 1 stopped mid-batch with records kept for the processor, then 1 -> 2
    killed with kill -9 at a random moment of the switch: the processor goes on from its
    last recorded checkpoint and writes every record once, in order. A conversion that
    left out the records kept for it (the feed is never asked for them again) or its
    checkpoint would show as a gap or a repeat."""
    (port,) = free_ports(1)
    out = tmp_path / "out.txt"
    body = (f'{command(ROOT / "samples" / "kcl" / "processor.py", out, "--delay", 0.01)}\n'
            f'env = {{ PYTHONPATH = "{kclpy}" }}\nbatch_records = 25\n')
    p = start(launcher, tmp_path, port, {"orders": body})
    feed(port, 7, "orders", range(1, 301), eos=False)
    wait_until(lambda: out.exists() and len(written(out)) >= 60, "60 lines written", 30)
    p.stop()  # mid-batch: records kept for the processor after its checkpoint
    config = ["--config", str(tmp_path / "coord.toml")]
    p = launcher.start(TARGET, "coord", args=[*config, "--upgrade-to", f"{VERSIONS}V1"])
    p.wait_for("upgraded to KclCoordinatorV1 version 1 (live)")
    resumed = p.wait_for("started processor (pid")
    assert int(resumed.rsplit(" ", 1)[1]) >= 50  # from the checkpoint version 0 recorded
    wait_until(lambda: len(written(out)) >= 150, "150 lines written", 30)
    p.stop()
    args = [*config, "--upgrade-to", f"{VERSIONS}V2"]
    p = launcher.start(f"{VERSIONS}V1", "coord", args=args, primary=False)
    p.wait_for("registered the upgrade of coord from version 1 to version 2")
    time.sleep(random.uniform(0.0, 1.5))
    p.kill()
    p = launcher.start(f"{VERSIONS}V1", "coord", args=args)
    p.wait_for("listening for sources")
    feed(port, 7, "orders", range(301, 321), eos=True)
    p.wait_for("processor: stream ended at 320", timeout=60)
    assert written(out) == list(range(1, 321))  # every record once, in order
    p.stop()
    state = upgrade_test("coord", KclCoordinatorV1, KclCoordinatorV2, home=launcher.home).state
    assert isinstance(state, KclCoordinatorV2)
    rec = state.kcl.streams[7]
    assert (rec.checkpoint, rec.finished, rec.records) == (320, True, [])


@pytest.mark.parametrize(("protocol", "how", "end", "answer", "kept"), [
    ("current", "kill", "leaseLost", "ShutdownException", 10),
    ("current", "stop", "shutdownRequested", "ok", 20),
    ("shutdown", "kill", "shutdown ZOMBIE", "ShutdownException", 10),
    ("shutdown", "stop", "shutdown ZOMBIE", "ShutdownException", 10),
])
def test_end_of_primacy_says_why(launcher: Launcher, tmp_path: Path, protocol: str,
                                 how: str, end: str, answer: str, kept: int) -> None:
    """The coordinator killed -9 under the binding: the stream moves to another primary,
    leaseLost (ZOMBIE in the older protocol), and the checkpoint the child then asks for
    anyway is refused. SIGTERM to ``ambrosia run``: an ordinary stop, shutdownRequested,
    whose checkpoint is recorded (the coordinator stops after the side effects)."""
    (port,) = free_ports(1)
    body = f'{command(CHILDREN, "ends", 10)}\nprotocol = "{protocol}"\n'
    p = start(launcher, tmp_path, port, {"s": body})
    feed(port, 5, "s", range(1, 11), eos=False)
    p.wait_for("kcl s: checkpoint at 10 recorded")
    feed(port, 5, "s", range(11, 21), eos=False)
    p.wait_for("test child: holding 20")
    if how == "kill":
        os.kill(coordinator_pid(p), signal.SIGKILL)
        assert p.proc.wait(30) != 0
        p.kill()  # joins the log reader
    else:
        assert p.stop() == 0
    log = "\n".join(p.lines)
    ends = [line.split("test child: ", 1)[1] for line in p.lines
            if "test child: " in line and "answered" not in line and "holding" not in line]
    assert ends == [end], p.lines[-10:]
    assert f"checkpoint '20' answered {answer}" in log
    rec = repro("coord", KclCoordinator, home=launcher.home).state.kcl.streams[5]
    assert rec.checkpoint == kept  # where the next life's processor starts


def test_older_protocol_with_amazon_kclpy_1(launcher: Launcher, tmp_path: Path,
                                            kclpy_v1: Path) -> None:
    """A processor on amazon-kclpy 1.x's API with that kclpy: every record once,
    checkpoints after each batch, the stream's end as shutdown TERMINATE (checkpointed),
    and an ordinary stop as shutdown ZOMBIE (its checkpoint refused, as kclpy reports)."""
    (port,) = free_ports(1)
    out, kept = tmp_path / "legacy.txt", tmp_path / "kept.txt"
    env = f'env = {{ PYTHONPATH = "{kclpy_v1}" }}\nprotocol = "shutdown"\nbatch_records = 7\n'
    p = start(launcher, tmp_path, port, {"legacy": f"{command(V1, out)}\n{env}",
                                         "kept": f"{command(V1, kept)}\n{env}"})
    feed(port, 3, "legacy", range(1, 31), eos=True)
    feed(port, 4, "kept", range(1, 11), eos=False)
    p.wait_for("kclpy v1 processor: terminated at 30")
    wait_until(lambda: kept.exists() and len(written(kept)) == 10, 30)
    assert p.stop() == 0
    assert written(out) == list(range(1, 31)) and written(kept) == list(range(1, 11))
    said = [line.split("kclpy v1 processor: ", 1)[1] for line in p.lines
            if "kclpy v1 processor: " in line]
    assert sorted(said) == sorted(["shard legacy", "terminated at 30", "shard kept",
                                   "shutdown ZOMBIE",
                                   "checkpoint refused: 'ShutdownException'"]), said
    assert not any("Traceback" in line for line in p.lines)
    state = repro("coord", KclCoordinator, home=launcher.home).state.kcl
    assert (state.streams[3].checkpoint, state.streams[3].finished) == (30, True)
    assert (state.streams[4].checkpoint, state.streams[4].finished) == (10, False)


def test_unruly_child_gets_answers_and_log_lines_never_a_hang(
        launcher: Launcher, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    body = (f'{command(CHILDREN, "unruly", tmp_path / "marks")}\ntimeout_seconds = 1\n'
            f'restart_max_seconds = 0.2\n')
    p = start(launcher, tmp_path, port, {"wild": body})
    t0 = time.monotonic()
    feed(port, 4, "wild", range(1, 21), eos=True)
    p.wait_for("checkpoint None answered ok")  # the fourth life finished the stream
    log = "\n".join(p.lines)
    for text in ("skipped a line: not JSON: 'a line that is no JSON'",
                 "skipped a line: not a JSON object: '[1, 2]'",
                 "skipped a line: unknown action 'dance'",
                 "checkpoint '999999' answered IllegalArgumentException",
                 "checkpoint 'twelve' answered IllegalArgumentException",
                 "a status for initialize while waiting for processRecords; killed",
                 "no answer to processRecords in 1 s; killed",
                 "checkpoint '1' answered InvalidStateException",
                 "checkpoint '20' answered ok"):
        assert text in log, text
    assert time.monotonic() - t0 < 30
    p.stop()
    rec = repro("coord", KclCoordinator, home=launcher.home).state.kcl.streams[4]
    assert (rec.checkpoint, rec.finished) == (20, True)


def test_no_processor_configured_is_a_plain_connector_coordinator(launcher: Launcher,
                                                                  tmp_path: Path) -> None:
    """No [kcl] table (here with a staging root): messages are taken and acknowledged,
    nothing is kept for processors, and the instance runs until it is stopped (it used
    to fail at once: no driver to wait for)."""
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, port, {}, f'staging = "{tmp_path / "staging"}"\n')
    feed(port, 3, "plain", range(1, 21), eos=True)  # returns once all 20 are acknowledged
    p.stop()
    assert not any("failed" in line for line in p.lines), p.lines[-5:]
    state = repro("coord", KclCoordinator, home=launcher.home).state
    assert state.core.streams[3].applied == 20 and state.kcl.streams == {}
    assert state.core.backlog == 0  # no sink, no processor: nothing holds a block


def test_a_bad_processor_entry_stops_the_instance_with_one_line(launcher: Launcher,
                                                                tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('listen = "127.0.0.1:0"\n[kcl.orders]\ncommand = "p"\nprotocol = "v9"\n')
    p = launcher.start(TARGET, "bad", args=["--config", str(cfg)])
    assert p.proc.wait(30) != 0
    p.kill()  # joins the log reader
    assert p.lines[-1] == ('ambrosia run: error: kcl.orders.protocol must be "current" or '
                           '"shutdown", got \'v9\'')


def test_a_child_that_crashes_at_every_start_is_said_once_counted_and_backed_off(
        launcher: Launcher, tmp_path: Path) -> None:
    """Its stderr comes line by line (indentation kept, a 100,000-character line in pieces
    of 64 KiB), for its first crash only; its failure is said once in full, once more as
    one line with the count, and then counted in the status, and it is started again with
    back-off: not a warning or a traceback every few seconds for ever."""
    (port,) = free_ports(1)
    body = f'{command(CHILDREN, "crashes", 100_000)}\nrestart_max_seconds = 0.4\n'
    status = tmp_path / "status.json"
    (tmp_path / "coord.toml").write_text(
        f'listen = "127.0.0.1:{port}"\nstatus_seconds = 0.3\nstatus_file = "{status}"\n'
        f'[kcl.bad]\n{body}\n')
    p = start(launcher, tmp_path, port, {})
    feed(port, 6, "bad", range(1, 3), eos=False)
    wait_until(lambda: sum("started processor (pid" in ln for ln in p.lines) >= 6,
               "six processors started", 30)
    lines = [ln.split("): ", 1)[1] for ln in p.lines if "kcl bad (pid " in ln]
    assert lines == ["Traceback (most recent call last):", '  File "child.py", line 1',
                     "    boom()", "RuntimeError: crashes at start", "x" * 65536,
                     "[continued] " + "x" * (100_000 - 65536)]
    warnings = [ln for ln in p.lines if "started again in" in ln]
    assert len(warnings) == 2, warnings  # the same reason each time: said once, then again
    assert "with back-off up to 0.4 s while it fails" in warnings[0]
    assert "the processor failed again (2 times since " in warnings[1]

    def counted() -> bool:
        try:
            bad = json.loads(status.read_text())["processors"]["bad"]
        except (OSError, ValueError, KeyError):
            return False
        return bad["failures_in_a_row"] >= 5 and bad["last_failure"] != ""

    wait_until(counted, "five failures in a row in the status", 30)
    p.stop()


def test_a_child_that_dies_after_each_batch_backs_off_and_its_crash_is_said_once(
        launcher: Launcher, tmp_path: Path) -> None:
    """Six lives process a batch, then die with a 30-line traceback; the seventh behaves.
    A batch processed is no reason to start again at once: the pause doubles until a child
    stayed up (the spacing of the starts, from the times the children recorded). The first
    crash is said in full, the second as one line with a count, the rest are counted."""
    (port,) = free_ports(1)
    starts = tmp_path / "starts.txt"
    body = (f'{command(CHILDREN, "dies", starts, 6)}\nbatch_records = 5\n'
            f'restart_max_seconds = 1\n')
    p = start(launcher, tmp_path, port, {"s": body})
    feed(port, 2, "s", range(1, 21), eos=True)
    p.wait_for("test child: life 7 behaves")  # held while it might crash, said at its end
    times = [float(t) for t in starts.read_text().split()]
    assert len(times) == 7
    for k, (a, b) in enumerate(itertools.pairwise(times)):
        assert b - a >= min(1.0, 0.1 * 2 ** k) / 2, (k, b - a)  # the pause's least draw
    pids = [int(ln.split("(pid ", 1)[1].split(")", 1)[0]) for ln in p.lines
            if "started processor (pid" in ln]
    said = {pid: [ln.split("): ", 1)[1] for ln in p.lines if f"kcl s (pid {pid}): " in ln]
            for pid in pids}
    assert said[pids[0]][0] == "Traceback (most recent call last):"
    assert said[pids[0]][-1] == "RuntimeError: died after a batch"
    assert len(said[pids[0]]) == 30
    assert [said[pid] for pid in pids[1:6]] == [[]] * 5  # the same crash: not again
    assert said[pids[6]][0] == "test child: life 7 behaves"
    reason = "the processor exited (code 1) during processRecords"
    warnings = [ln.split("kcl s: ", 1)[1] for ln in p.lines if "kcl s: " in ln
                and "started again in" in ln]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"{reason}; started again in ")
    assert re.fullmatch(rf"the processor failed again \(2 times since \d\d:\d\d:\d\d\): "
                        rf"{re.escape(reason)}; started again in \d+\.\d s", warnings[1])
    p.stop()
    rec = repro("coord", KclCoordinator, home=launcher.home).state.kcl.streams[2]
    assert (rec.checkpoint, rec.finished) == (20, True)


def test_a_long_or_unfinished_stderr_line_is_logged_in_pieces_as_it_comes(
        launcher: Launcher, tmp_path: Path) -> None:
    """A line of 2 x 64 KiB + 100 bytes is three log lines of its bytes, the later ones
    marked continued; an unfinished line is logged within moments, not when the child's
    stderr ends: a kill -9 of the instance then takes nothing of it."""
    (port,) = free_ports(1)
    p = start(launcher, tmp_path, port, {"s": command(CHILDREN, "talks", 2 * 65536 + 100,
                                                      1000)})
    feed(port, 2, "s", range(1, 4), eos=False)
    p.wait_for("kcl s: checkpoint at 3 recorded")
    p.wait_for("b" * 1000, timeout=10)  # the child is still up, the line unfinished
    p.kill()
    said = [ln.split("): ", 1)[1] for ln in p.lines if "kcl s (pid " in ln]
    assert said == ["a" * 65536, "[continued] " + "a" * 65536, "[continued] " + "a" * 100,
                    "b" * 1000]
