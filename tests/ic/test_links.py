"""Two instances calling each other through their coordinators, with crashes."""

from __future__ import annotations

import socket

import pytest
from ambrosia_ic.links import LINK_MAGIC

from .conftest import Harness, wait_until


def _connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=30)
    except ConnectionRefusedError:
        return None


def _settled(da, db) -> bool:  # type: ignore[no-untyped-def]
    a, b = da.snapshot(), db.snapshot()
    return (a["acked"] == a["sent"] and b["acked"] == b["sent"]
            and [t for t in b["received"] if t.startswith("A:")] == a["sent"]
            and [t for t in a["received"] if t.startswith("B:")] == b["sent"])


@pytest.mark.slow
def test_calls_across_kill9_of_either_side_arrive_exactly_once_in_order(
    harness: Harness,
) -> None:
    harness.register("A")
    harness.register("B")
    pa = harness.start("A")
    pb = harness.start("B")
    da = harness.drive("A", peer="B")
    db = harness.drive("B", peer="A")
    wait_until(lambda: da.primary.is_set() and db.primary.is_set(), "both primary")
    for k in range(30):
        da.impulse(k)
        db.impulse(k)
    wait_until(lambda: len(db.snapshot()["received"]) >= 5, "B receiving")
    harness.kill9(pb)  # the receiver dies mid-stream
    for k in range(30, 40):
        da.impulse(k)
    harness.start("B")
    db = harness.drive("B", peer="A")
    wait_until(db.primary.is_set, "B recovered")
    for k in range(40, 70):
        da.impulse(k)
        db.impulse(k)
    harness.kill9(pa)  # now the sender dies mid-stream
    da.thread.join(30)
    harness.start("A")
    da = harness.drive("A", peer="B")
    wait_until(da.primary.is_set, "A recovered")
    for k in range(70, 80):
        da.impulse(k)
        db.impulse(k)
    # The last Impulses are in flight until they come back applied: wait for them too,
    # or a snapshot taken before they return looks settled.
    wait_until(lambda: (da.snapshot()["sent"][-1:] == ["A:79"]
                        and db.snapshot()["sent"][-1:] == ["B:79"] and _settled(da, db)),
               "every call delivered and acknowledged")
    a, b = da.snapshot(), db.snapshot()
    # Exactly once and in order, in both directions.
    assert len(a["sent"]) == len(set(a["sent"])) >= 40
    assert len(b["received"]) == len(set(b["received"]))
    assert len(a["received"]) == len(set(a["received"]))
    assert [t for t in b["received"] if t.startswith("A:")] == a["sent"]
    assert [t for t in a["received"] if t.startswith("B:")] == b["sent"]
    assert a["sent"][-10:] == [f"A:{k}" for k in range(70, 80)]
    assert da.error is None and db.error is None


def test_a_stranger_is_refused_and_logged(harness: Harness) -> None:
    harness.register("B")
    pb = harness.start("B")
    db = harness.drive("B")
    wait_until(db.primary.is_set, "primary")
    port = harness.reg("B").ic_port
    with wait_until(lambda: _connect(port), "the link port to open") as s:
        head = b""
        while len(head) < 24:
            head += s.recv(24 - len(head))
        assert head[:8] == LINK_MAGIC
        # Claims to be a registered instance but cannot prove it knows the secret.
        s.sendall(b"\x02A" + b"\x02B" + bytes(16) + bytes(32))
        assert s.recv(100) == b""  # closed without a word
    wait_until(lambda: "refused a link" in harness.stderr_of(pb), "the refusal logged")
    line = next(x for x in harness.stderr_of(pb).splitlines() if "refused a link" in x)
    assert "failed the link authentication" in line
    assert pb.poll() is None


def test_a_coordinator_with_another_secret_cannot_deliver(harness: Harness, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A sender registered in a different registry (another secret) is refused."""
    from ambrosia_ic import launch, registry

    harness.register("B")
    pb = harness.start("B")
    db = harness.drive("B")
    wait_until(db.primary.is_set, "primary")
    other = tmp_path / "other-home"
    from ambrosia_core.ports import free_ports

    rp, sp, ip = free_ports(3)
    registry.register(instance_name="A", receive_port=rp, send_port=sp, ic_port=ip,
                      log_dir=tmp_path / "other-logs", home=other)
    breg = harness.reg("B")
    registry.register(instance_name="B", receive_port=breg.receive_port,
                      send_port=breg.send_port, ic_port=breg.ic_port,
                      log_dir=tmp_path / "unused", home=other)
    pa = launch.start_coordinator("A", home=other)
    harness.procs.append(pa)
    from .rawbinding import CounterApp, Driver, RawBinding

    da = Driver(RawBinding(rp, sp), CounterApp("A", "B")).start()
    harness.bindings.append(da.b)
    wait_until(da.primary.is_set, "A primary")
    da.impulse(1)
    wait_until(lambda: da.snapshot()["sent"] == ["A:1"], "A sent")
    wait_until(lambda: "refused a link" in harness.stderr_of(pb), "B refused A")
    assert db.snapshot()["received"] == []
