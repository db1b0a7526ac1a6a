"""A run of RPCs (a replay's records) is dispatched by the engine's short cut for the usual
call (a fork in this binding's envelope, arguments of their exact immutable types): it
must do exactly what the general dispatch of one logged input at a time does, for the
usual calls and for every odd one mixed in."""

from __future__ import annotations

import logging
from typing import Any

import msgpack
import pytest

from ambrosia_core.wire import (
    BecomingPrimary,
    RpcType,
    encode_checkpoint_record,
    encode_control_record,
    encode_record,
    encode_rpc,
)
from ambrosia_py import Immortal, fork, rpc
from ambrosia_py.immortal import default_method_id
from ambrosia_py.runtime.arguments import CallPlan
from ambrosia_py.runtime.engine import Engine
from ambrosia_py.serialization import Envelope, encode_json_args
from ambrosia_py.testing.inmemory import InMemoryCoordinator


class Ledger(Immortal):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @fork
    def add(self, n: int) -> None:
        self.seen.append(("add", n, self.ctx.now().timestamp(), self.ctx.random()))
        if n == 3:
            self.self_proxy.add(4)  # a send while handling: its frame goes out in order

    @fork
    def mixed(self, s: str, b: bytes, f: float, flag: bool) -> None:
        self.seen.append(("mixed", s, b, f, flag))

    @fork
    def loose(self, x, y=0) -> None:
        self.seen.append(("loose", x, y))

    @fork
    def fails(self, n: int) -> None:
        self.seen.append(("fails", n))
        raise ValueError(f"no {n}")

    @fork
    def later(self, n: int) -> Any:
        return self._later(n)  # a coroutine from a plain method: stepped like a handler's

    async def _later(self, n: int) -> None:
        self.seen.append(("later", n))

    @rpc
    async def double(self, n: int) -> int:  # no await: it cannot suspend
        self.seen.append(("double", n))
        return 2 * n


def env(method: str, args: list[Any], kwargs: dict[str, Any] | None = None, *,
        call_id: int = -1, ts: Any = 1_000, entropy: int = 99) -> bytes:
    body = Envelope(ts, entropy, call_id, "peer", [args, kwargs or {}]).encode()
    return encode_rpc(default_method_id(method), RpcType.FORK, body)


CALLS = [
    env("add", [1]), env("add", [2], ts=5_000), env("add", [3], ts=2_000),
    env("mixed", ["é", b"\x00", 1.5, True]),
    env("add", [True]),  # a bool for an int: the serializer decides
    env("add", [1.0]), env("add", ["1"]), env("add", [1, 2]), env("add", [], {"n": 7}),
    env("add", [8], {"x": 1}),
    env("loose", [[1, 2], {"a": 1}]), env("loose", [1]),
    env("fails", [5]), env("later", [6]),
    env("double", [21], call_id=4), env("double", [8]),  # awaited, and not
    env("add", [9], call_id=3),  # a fork never answers
    env("add", [10], ts=True), env("add", [11], entropy=-1),
    encode_rpc(default_method_id("add"), RpcType.FORK, b"\x95\xc1"),  # not msgpack
    encode_rpc(default_method_id("add"), RpcType.FORK, msgpack.packb([1, 2, 3])),
    encode_rpc(default_method_id("add"), RpcType.FORK, msgpack.packb([1, 2, 3, "p", 7])),
    encode_rpc(default_method_id("add"), RpcType.FORK, encode_json_args({"n": 12})),
    encode_rpc(default_method_id("add"), RpcType.FORK, b""),
    encode_rpc(default_method_id("add"), RpcType.FORK, env("add", [13])[-8:], reserved=1),
    encode_rpc(123_456, RpcType.FORK, env("add", [14])),  # no such method
    env("add", [15]),
]


class OneAtATime(Engine):
    """The general dispatch only: every RPC as one logged input (``Engine._input``)."""

    def _call_plan(self, mid: int) -> CallPlan | None:
        return None


def replayed(engine: Engine, calls: list[bytes], caplog: pytest.LogCaptureFixture
             ) -> tuple[Any, ...]:
    """A recovery from the checkpoint of a first start, with one record per call, fed
    at once: the engine sees them as one run of RPCs."""
    first = InMemoryCoordinator(Engine(Ledger, "me"))
    first.first_start()
    records = [encode_record(7, first.seq + i, c) for i, c in enumerate(calls)]
    ic = InMemoryCoordinator(engine)
    caplog.clear()
    ic.feed(encode_checkpoint_record(7, len(first.checkpoint)) + first.checkpoint
            + b"".join(records))
    ic.feed(encode_control_record(7, BecomingPrimary()))
    logs = [(r.levelname, r.getMessage().split("\n")[0]) for r in caplog.records]
    return (ic.instance.seen, [tuple(o) for o in ic.outputs], engine._inputs_seen,
            engine._last_ts, engine.current_input, logs)


@pytest.mark.parametrize("at", range(len(CALLS)))
def test_a_run_of_rpcs_does_what_one_input_at_a_time_does(at: int,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    """Each odd call, between usual ones, in one run."""
    caplog.set_level(logging.INFO)
    calls = [env("add", [100]), CALLS[at], env("add", [101]), CALLS[at]]
    want = replayed(OneAtATime(Ledger, "me", log_replay=True), calls, caplog)
    assert replayed(Engine(Ledger, "me", log_replay=True), calls, caplog) == want


def test_every_call_in_one_run(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    want = replayed(OneAtATime(Ledger, "me", log_replay=True), CALLS, caplog)
    got = replayed(Engine(Ledger, "me", log_replay=True), CALLS, caplog)
    assert got == want
    seen, outputs = got[0], got[1]
    assert ("double", 21) in seen and ("later", 6) in seen and ("fails", 5) in seen
    assert any(o[0] == "peer" for o in outputs)  # double's result went to its caller
    assert [x[:3] for x in seen[:3]] == [("add", 1, 1e-6), ("add", 2, 5e-6), ("add", 3, 2e-6)]
