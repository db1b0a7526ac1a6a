"""SIGTERM and Ctrl-C are ordinary stops of `ambrosia run` and `ambrosia ic`: one line, exit 0
(SIGTERM) or 130 (SIGINT), and a restart recovers everything acknowledged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from ambrosia_ic.logstore import LOCK_NAME

from ambrosia_cli.local_coordinator import lock_held
from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, repro, start_immortal
from samples.counter.counter import Counter
from tests.launcher import ROOT, wait_until

from .conftest import Harness
from .test_first_start import _run_chain

pytestmark = pytest.mark.integration

COUNTER = "samples.counter.counter:Counter"


def _stopped_run(p: ImmortalProcess, code: int, line: str) -> None:
    assert p.proc.wait(30) == code
    p.stop()  # joins the stderr reader
    assert p.lines[-1] == line
    assert not [ln for ln in p.lines if "error" in ln or "Traceback" in ln], "\n".join(p.lines)


@pytest.mark.parametrize(("sig", "to_group", "code"), [
    (signal.SIGTERM, False, 0),   # kill PID
    (signal.SIGTERM, True, 0),    # timeout, service managers: the whole process group
    (signal.SIGINT, True, 130),   # Ctrl-C: the terminal's foreground process group
])
def test_a_signal_stops_ambrosia_run_and_a_restart_loses_nothing(
        harness: Harness, sig: signal.Signals, to_group: bool, code: int) -> None:
    p = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    p.wait_for("count is 1")
    if to_group:
        os.killpg(p.proc.pid, sig)
    else:
        p.proc.send_signal(sig)
    _stopped_run(p, code, f"ambrosia run: counter stopped ({sig.name})")
    # Its coordinator is gone too: the log lock is free.
    assert not lock_held(harness.home / "logs" / "counter_0" / LOCK_NAME)
    p = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    p.wait_for("count is 1 on becoming primary")
    p.proc.send_signal(signal.SIGTERM)
    _stopped_run(p, 0, "ambrosia run: counter stopped (SIGTERM)")
    assert repro("counter", Counter, home=harness.home).state.applied == [1]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_stops_ambrosia_ic_and_everything_acknowledged_is_recovered(
        harness: Harness, sig: signal.Signals, code: int) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 5)  # five impulses, each acknowledged only once durable
    acked = d1.snapshot()["acked"]
    proc.send_signal(sig)
    assert proc.wait(30) == code
    assert proc.stdout is not None
    assert proc.stdout.read() == f"ambrosia-ic stopped: instance=alpha signal={sig.name}\n"
    assert harness.stderr_of(proc) == ""
    d1.thread.join(30)
    harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    replayed = d2.marks["take-becoming-primary-checkpoint"]
    assert d2.records[:replayed] == d1.records
    assert d2.snapshot()["acked"] == acked == [f"alpha:{k}" for k in range(5)]


def test_a_debug_instance_replay_ends_its_binding_without_an_error(harness: Harness) -> None:
    p = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    p.wait_for("count is 1")
    p.proc.send_signal(signal.SIGTERM)
    _stopped_run(p, 0, "ambrosia run: counter stopped (SIGTERM)")
    # Replayed handlers' log lines are shown (marked) only when asked for.
    env = dict(harness.env, AMBROSIA_LOG_REPLAY="1", PYTHONPATH=os.pathsep.join(
        q for q in (str(ROOT), os.environ.get("PYTHONPATH", "")) if q))
    for flag, code, last in (
            (["--debug-replay"], 0, "ambrosia run: counter: the replay ended after 2 messages"),
            ([], 1, "ambrosia run: error: the coordinator of counter closed the connection "
                    "while the instance was recovering (after 2 messages); if it was `ambrosia "
                    "debug-instance`, that is the end of its replay: pass --debug-replay")):
        rp, sp = free_ports(2)
        debug = harness.popen("debug-instance", "-i", "counter", "-c", "1", "-rp", str(rp),
                              "-sp", str(sp), "--idle-timeout", "0.5")
        assert debug.stdout is not None
        assert debug.stdout.readline().startswith("ambrosia-ic ready:")
        r = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", COUNTER, "-i", "counter",
                            "--receive-port", str(rp), "--send-port", str(sp), *flag],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert debug.wait(30) == 0
        assert (r.returncode, r.stderr.splitlines()[-1]) == (code, last)
        assert "[replay] count is 1" in r.stderr  # the replay ran the handler


def test_a_coordinator_stopped_alone_is_an_ordinary_stop_of_ambrosia_run(
        harness: Harness) -> None:
    p = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    line = p.wait_for("started the coordinator (pid ")
    p.wait_for("count is 1")
    os.kill(int(line.rsplit("pid ", 1)[1].rstrip(")")), signal.SIGTERM)
    _stopped_run(p, 0, "ambrosia run: counter stopped (its coordinator was stopped)")


def test_a_coordinator_that_dies_under_ambrosia_run_is_one_error_line(harness: Harness) -> None:
    p = start_immortal(COUNTER, "counter", home=harness.home, cwd=ROOT)
    line = p.wait_for("started the coordinator (pid ")
    os.kill(int(line.rsplit("pid ", 1)[1].rstrip(")")), signal.SIGKILL)
    assert p.proc.wait(30) == 1
    p.stop()
    assert p.lines[-1] == ("ambrosia run: error: the coordinator of counter stopped (killed by "
                           "SIGKILL)")
    assert [ln for ln in p.lines if "error" in ln] == [p.lines[-1]]


def test_a_coordinator_resetting_the_connection_while_the_immortal_writes_is_a_close(
        ) -> None:
    """A coordinator that stops (or dies) while the binding writes resets the connection;
    the runner ends as when the connection closes, not with a traceback."""
    import asyncio
    import logging
    import socket
    import struct

    from ambrosia_core.wire import TakeBecomingPrimaryCheckpoint, encode_control_record
    from ambrosia_py.runtime.engine import Engine
    from ambrosia_py.runtime.runner import ImmortalRunner

    async def scenario() -> ImmortalRunner:
        accepted: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        both = asyncio.Event()

        async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.append((r, w))
            if len(accepted) == 2:
                both.set()

        recv = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        send = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        rp, sp = (srv.sockets[0].getsockname()[1] for srv in (recv, send))
        engine = Engine(Counter, "counter", logger=logging.getLogger("test.reset"))
        runner = ImmortalRunner(engine, rp, sp, progress=False)
        task = asyncio.create_task(runner.run())
        await asyncio.wait_for(both.wait(), 10)
        (_, to_binding_r), (_, to_binding_s) = accepted  # receive port first, then send port
        # Reset the binding's receive-port connection (RST, not FIN), then ask for the
        # first start's InitialMessage and checkpoint: the binding writes into the reset.
        sock = to_binding_r.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        to_binding_r.transport.abort()
        await asyncio.sleep(0.2)
        to_binding_s.write(encode_control_record(1, TakeBecomingPrimaryCheckpoint()))
        await asyncio.wait_for(task, 10)
        to_binding_s.close()
        recv.close()
        send.close()
        return runner

    runner = asyncio.run(scenario())
    assert runner.closed_by_coordinator
