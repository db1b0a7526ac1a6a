"""The event loop of both processes: uvloop where it is installed (a dependency), with a
short scheduler slice, and the same behaviour of a socket write on either loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_core.loops import (
    DEFAULT_SLICE_US,
    Backoff,
    loop_runner,
    said_at,
    write_unless_closing,
)
from ambrosia_core.ports import free_ports
from ambrosia_py.testing import ImmortalProcess, repro
from tests.launcher import ROOT, Launcher

from .apps import Caller

pytestmark = pytest.mark.integration


def _uses_uvloop(pid: int) -> bool:
    """Whether the process runs a uvloop loop: libuv wakes its loop through an eventfd,
    asyncio's loop through a socket pair (importing uvloop alone opens neither)."""
    fds = Path(f"/proc/{pid}/fd")
    return any("eventfd" in os.readlink(fd) for fd in fds.iterdir())


def _slice_ns(pid: int) -> int:
    """The scheduler slice the kernel runs the process's main thread in."""
    for line in Path(f"/proc/{pid}/sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    raise AssertionError("the kernel shows no se.slice")


def _coordinator_pid(p: ImmortalProcess) -> int:
    line = p.wait_for("started the coordinator (pid")
    return int(line.rsplit("pid ", 1)[1].split(")")[0])


def test_an_awaited_call_across_a_crash_runs_on_uvloop_in_short_slices(
        launcher: Launcher) -> None:
    """Both the bindings and their coordinators run on uvloop in 100 us slices: nothing
    to set, and an awaited call survives a crash of its caller."""
    from ambrosia_ic import registry

    rp, sp, icp = free_ports(3)
    registry.register(instance_name="calc", receive_port=rp, send_port=sp, ic_port=icp,
                      log_dir=str(launcher.home / "logs"), home=launcher.home)
    caller = launcher.start("tests.runtime.apps:Caller", "caller", primary=False)
    caller.wait_for("caller: awaiting calc")
    caller.kill()  # the call is in the log, its result is not
    caller = launcher.start("tests.runtime.apps:Caller", "caller")
    calc = launcher.start("tests.runtime.apps:Calculator", "calc")
    caller.wait_for("caller: done")
    for p in (caller, calc):
        for pid in (p.proc.pid, _coordinator_pid(p)):
            assert _uses_uvloop(pid)
            assert _slice_ns(pid) == DEFAULT_SLICE_US * 1000
    caller.stop()
    calc.stop()
    state = repro("caller", Caller, home=launcher.home).state
    assert state.results == [3.5, "ZeroDivisionError: division by zero", [42, "HI"],
                             "RemoteCallError"]


def test_the_loop_is_uvloop_where_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    from ambrosia_core import loops

    assert loop_runner() is uvloop.run
    monkeypatch.setattr(loops, "uvloop_available", lambda: False)
    assert loop_runner() is asyncio.run


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_write_to_a_closed_connection_is_dropped_on_either_loop(loop: str) -> None:
    """uvloop raises where asyncio drops; every write to a socket is made as asyncio's."""
    async def main() -> tuple[bool, str]:
        async def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        reader, writer = await asyncio.open_connection(host, port)
        assert await reader.read() == b""  # the peer hung up
        writer.close()
        await writer.wait_closed()
        write_unless_closing(writer, b"dropped")  # must not raise, on either loop
        try:
            writer.write(b"raw")
            raw = "dropped"
        except RuntimeError:
            raw = "raised"
        server.close()
        return writer.is_closing(), raw

    import uvloop

    closing, raw = (uvloop.run if loop == "uvloop" else asyncio.run)(main())
    assert closing
    assert raw == ("raised" if loop == "uvloop" else "dropped")


def test_a_shorter_slice_keeps_the_nice_value_spares_children_and_batch_processes() -> None:
    code = (
        "import os, subprocess, sys\n"
        "from ambrosia_core.loops import shorten_slice\n"
        "from tests.runtime.test_loops import _slice_ns\n"
        "os.nice(5)\n"
        "done = shorten_slice(300)\n"
        "print(done, os.getpriority(os.PRIO_PROCESS, 0), _slice_ns(os.getpid()))\n"
        "child = subprocess.Popen(['sleep', '5'])\n"
        "print(_slice_ns(child.pid))\n"
        "child.kill()\n"
        "os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))\n"
        "print(shorten_slice(200))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    kernels = _slice_ns(os.getpid())
    assert r.stdout.split() == ["True", "5", "300000", str(kernels), "False"], r.stderr


# ---------------------------------------------------------------- the shared back-off


@given(floor=st.floats(0.001, 2.0), cap=st.floats(0.001, 30.0),
       fails=st.lists(st.booleans(), min_size=1, max_size=40), seed=st.integers(0, 2**32))
def test_back_off_waits_double_to_the_cap_jittered_and_reset_only_by_progress(
        floor: float, cap: float, fails: list[bool], seed: int) -> None:
    import random

    b = Backoff(floor, cap, random.Random(seed))
    low = min(floor, cap)
    streak = 0
    for fail in fails:
        if not fail:
            b.progress()
            streak = 0
            continue
        full = min(cap, low * 2 ** streak)
        delay = b.failed()
        streak += 1
        assert full / 2 <= delay <= full  # in the upper half of its value, never past cap
        assert b.failures == streak


def test_a_failure_is_said_first_then_at_each_power_of_ten() -> None:
    assert [n for n in range(1, 2001) if said_at(n)] == [1, 10, 100, 1000]


def test_a_back_off_refuses_a_wait_of_zero() -> None:
    with pytest.raises(ValueError, match="above 0"):
        Backoff(0.0, 1.0)
