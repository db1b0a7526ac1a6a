"""One rule says which outputs are Impulses (routed unnumbered, left out of the replay
digest); the coordinator and the debug instance both use it."""

from __future__ import annotations

import pytest
from ambrosia_ic.logstore import is_impulse

from ambrosia_core.wire import OutgoingRpc, RpcType


@pytest.mark.parametrize(("rpc_type", "reserved", "expected"), [
    (RpcType.IMPULSE, 0, True),
    (RpcType.FORK, 0, False),
    (RpcType.ASYNC, 0, False),
    (RpcType.IMPULSE, 1, False),  # a reserved byte set: not the plain Impulse form
])
def test_is_impulse(rpc_type: RpcType, reserved: int, expected: bool) -> None:
    assert is_impulse(OutgoingRpc("", 7, int(rpc_type), b"x", reserved)) is expected
