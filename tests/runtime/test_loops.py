"""The event loop of both processes: uvloop by default where it is installed, asyncio's when
asked, and the same behaviour on either (an awaited call across a crash of the caller)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_core.loops import Backoff, loop_runner, said_at, write_unless_closing
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


@pytest.mark.parametrize(("loop", "slice_us"), [("asyncio", "0"), ("uvloop", "250"),
                                               (None, None)])
def test_an_awaited_call_across_a_crash_on_each_loop(launcher: Launcher, loop: str | None,
                                                      slice_us: str | None) -> None:
    """None: the defaults, uvloop (a dependency) and a 100 us slice."""
    from ambrosia_ic import registry

    env = dict(os.environ)
    for var in ("AMBROSIA_PY_LOOP", "AMBROSIA_IC_LOOP", "AMBROSIA_SLICE_US"):
        env.pop(var, None)
    if loop is not None:
        env["AMBROSIA_PY_LOOP"] = env["AMBROSIA_IC_LOOP"] = loop
    if slice_us is not None:
        env["AMBROSIA_SLICE_US"] = slice_us
    rp, sp, icp = free_ports(3)
    registry.register(instance_name="calc", receive_port=rp, send_port=sp, ic_port=icp,
                      log_dir=str(launcher.home / "logs"), home=launcher.home)
    caller = launcher.start("tests.runtime.apps:Caller", "caller", primary=False, env=env)
    caller.wait_for("caller: awaiting calc")
    caller.kill()  # the call is in the log, its result is not
    caller = launcher.start("tests.runtime.apps:Caller", "caller", env=env)
    calc = launcher.start("tests.runtime.apps:Calculator", "calc", env=env)
    caller.wait_for("caller: done")
    want_uvloop = loop != "asyncio"
    kernels = _slice_ns(os.getpid())  # this test's process: the kernel's own slice
    want_slice = {"0": kernels, "250": 250_000, None: 100_000}[slice_us]
    for p in (caller, calc):
        for pid in (p.proc.pid, _coordinator_pid(p)):
            assert _uses_uvloop(pid) is want_uvloop
            assert _slice_ns(pid) == want_slice
    caller.stop()
    calc.stop()
    state = repro("caller", Caller, home=launcher.home).state
    assert state.results == [3.5, "ZeroDivisionError: division by zero", [42, "HI"],
                             "RemoteCallError"]


@pytest.mark.parametrize(("var", "value", "error"), [
    ("AMBROSIA_PY_LOOP", "trio", "unknown event loop 'trio' in --loop or $AMBROSIA_PY_LOOP "
     "(expected auto, asyncio, uvloop)"),
    ("AMBROSIA_SLICE_US", "1ms", "$AMBROSIA_SLICE_US must be a whole number of microseconds "
     "from 0 to 100000 (0: the kernel's own slice), got '1ms'"),
])
def test_a_bad_setting_stops_ambrosia_run_before_it_starts_anything(
        tmp_path: Path, var: str, value: str, error: str) -> None:
    env = dict(os.environ, AMBROSIA_HOME=str(tmp_path), **{var: value},
               PYTHONPATH=os.pathsep.join((str(ROOT), os.environ.get("PYTHONPATH", ""))))
    r = subprocess.run([sys.executable, "-m", "ambrosia_cli", "run", "tests.runtime.apps:Caller",
                        "-i", "caller"], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"ambrosia run: error: {error}"]
    assert not (tmp_path / "logs").exists() and not list(tmp_path.glob("*/caller*"))


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

    closing, raw = loop_runner(loop, setting="test")(main())
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
