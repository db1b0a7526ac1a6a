"""The binding's connection to its coordinator's ports, under its declared retry: a port
nobody listens on is tried again until the runner's connect timeout, then refused in one
line."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.ports import free_ports
from ambrosia_py.runtime import runner
from ambrosia_py.runtime.runner import connect_with_retry


def test_a_port_nobody_listens_on_is_refused_in_one_line_after_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    (port,) = free_ports(1)
    tried: list[float] = []
    connect = asyncio.open_connection

    async def counted(*args: object, **kw: object) -> object:
        tried.append(asyncio.get_running_loop().time())
        return await connect(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner.asyncio, "open_connection", counted)
    with pytest.raises(CoordinatorError) as refused:
        asyncio.run(connect_with_retry("127.0.0.1", port, 0.3))
    assert str(refused.value) == (f"cannot connect to the coordinator at 127.0.0.1:{port}: "
                                  f"Connect call failed ('127.0.0.1', {port})")
    # Tried again from 20 ms at most every 250 ms, for the timeout, not once; given up
    # soon after it.
    assert len(tried) >= 4, tried
    assert 0.25 <= tried[-1] - tried[0] < 0.3 + 0.25 + 1


def test_a_connect_that_hangs_is_cut_and_the_runner_gives_up_at_its_timeout() -> None:
    """A listener that never accepts, its queue full: the kernel drops the next SYN and a
    connect would hang through its retries (minutes). Each attempt is cut at its declared
    timeout, so the runner is refused in one line at its own timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held = []
    try:
        for _ in range(4):  # fill the accept queue (its length is the backlog + 1)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)

        async def main() -> None:
            # The guard only stops a hang: the refusal itself comes at about 1 s.
            await asyncio.wait_for(connect_with_retry("127.0.0.1", port, 1.0), 60)

        with pytest.raises(CoordinatorError) as refused:
            asyncio.run(main())
        assert str(refused.value) == (f"cannot connect to the coordinator at 127.0.0.1:{port}: "
                                      "the attempt ran past its timeout of 1 s")
    finally:
        for s in held:
            s.close()
        listener.close()
