"""The await round trip's ceiling runs its four processes to the end and checks each
reply (a benchmark that silently measured nothing would report a ceiling of zero)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ceilings


def test_round_trips_returns_one_timing_per_call_after_the_warm_up() -> None:
    got = ceilings.round_trips(40, warmup=5)
    assert len(got) == 40
    assert all(t > 0 for t in got)


def test_a_wrong_reply_fails_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ceilings.encode_outgoing_rpc

    def off_by_one(dest: str, method: int, kind: int, env: bytes) -> bytes:
        if dest == "caller":  # the callee's answer: change the result it carries
            msg = ceilings.msgpack.unpackb(env)
            env = ceilings.msgpack.packb([msg[0], msg[1], msg[2] + 1], use_bin_type=True)
        return real(dest, method, kind, env)

    monkeypatch.setattr(ceilings, "encode_outgoing_rpc", off_by_one)
    with pytest.raises(RuntimeError, match="the round-trip ceiling failed"):
        ceilings.round_trips(5, warmup=1)
