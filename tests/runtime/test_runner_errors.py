"""The runner over real sockets when its coordinator sends bad bytes: the run ends with
the engine's typed error (the send port is read in a protocol callback, where an
exception would otherwise go to the loop's handler and the run end as a plain close)."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from ambrosia_core.errors import WireFormatError
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.runtime.runner import ImmortalRunner
from tests.launcher import Launcher

from .apps import Flooder


async def _bad_coordinator(record: bytes) -> ImmortalRunner:
    accepted: list[asyncio.StreamWriter] = []
    both = asyncio.Event()

    async def on_connect(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)
        if len(accepted) == 2:
            both.set()

    recv = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    send = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    rp, sp = (srv.sockets[0].getsockname()[1] for srv in (recv, send))
    engine = Engine(Flooder, "flooder", logger=logging.getLogger("test.bad-bytes"))
    runner = ImmortalRunner(engine, rp, sp, progress=False)
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(both.wait(), 10)
        accepted[1].write(record)  # receive port first, then the send port
        await asyncio.wait_for(task, 10)
    finally:
        for w in accepted:
            w.close()
        recv.close()
        send.close()
    return runner


def test_bad_bytes_from_the_coordinator_end_the_run_with_the_typed_error() -> None:
    # A record header whose length (5) is shorter than the header itself.
    record = struct.pack("<iiQq", 1, 5, 0, 0)
    with pytest.raises(WireFormatError, match="smaller than the 24-byte header"):
        asyncio.run(_bad_coordinator(record))


@pytest.mark.integration
def test_a_failed_side_effect_stops_the_instance_in_one_line(launcher: Launcher) -> None:
    p = launcher.start("tests.runtime.apps:FailingEffect", "effect")
    assert p.proc.wait(30) == 1
    p.kill()  # joins the log reader
    assert p.lines[-1] == ("ambrosia run: error: a side effect of effect failed: ValueError: "
                           "the disk is gone")
    assert not any("Traceback" in line or "never retrieved" in line for line in p.lines)
    # Its coordinator was stopped first: it says nothing of a binding that went away.
    assert not any("the binding closed its connection" in line for line in p.lines)
