"""Two instances calling each other through their coordinators, with crashes."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
from ambrosia_ic.coordinator.link_server import LinkServer
from ambrosia_ic.links import LINK_MAGIC, open_link

from ambrosia_core.wire import CONTROL_SEQ, Rpc, encode_record
from tests.launcher import wait_until

from ..pki import Pki, Relay, make_pki
from .conftest import Harness


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


# ------------------------------------------------------------------ over TLS
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pki, Pki, Pki]:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.slow
def test_calls_across_kill9_arrive_exactly_once_over_tls(harness: Harness, pki) -> None:  # type: ignore[no-untyped-def]
    """The crash test above, every link over TLS with mutual certificates."""
    harness.options = pki[0].args()
    test_calls_across_kill9_of_either_side_arrive_exactly_once_in_order(harness)
    for proc in harness.procs:  # crashes cut handshakes, but no certificate is refused
        assert "its certificate" not in harness.stderr_of(proc), harness.stderr_of(proc)


def test_calls_flow_over_tls_and_a_coordinator_with_a_strange_certificate_is_refused(
        harness: Harness, pki) -> None:  # type: ignore[no-untyped-def]
    ours, stranger, _ = pki
    harness.register("A")
    harness.register("B")
    harness.register("C")
    harness.options = ours.args()
    harness.start("A")
    pb = harness.start("B")
    pc = harness.start("C", options=[])
    da = harness.drive("A", peer="B")
    db = harness.drive("B")
    wait_until(lambda: da.primary.is_set() and db.primary.is_set(), "both primary")
    for k in range(5):
        da.impulse(k)
    wait_until(lambda: da.snapshot()["acked"] == [f"A:{k}" for k in range(5)], "acks")
    assert db.snapshot()["received"] == [f"A:{k}" for k in range(5)]
    # C's certificate is signed by a CA B does not trust (C trusts B's, so only B refuses).
    harness.procs.remove(pc)
    harness.kill9(pc)
    harness.options = []
    both = harness.tmp / "both-cas.pem"
    both.write_bytes(stranger.ca.read_bytes() + ours.ca.read_bytes())
    cert, key = stranger.cert()
    harness.start("C", options=["--tls-cert", str(cert), "--tls-key", str(key),
                                "--tls-ca", str(both)])
    dc = harness.drive("C", peer="B")
    wait_until(dc.primary.is_set, "C primary")
    dc.impulse(1)
    wait_until(lambda: "refused a link" in harness.stderr_of(pb), "the refusal logged")
    lines = [x for x in harness.stderr_of(pb).splitlines() if "refused a link" in x]
    assert lines[0].startswith("ambrosia-ic: B: refused a link: TLS handshake with 127.0.0.1:")
    assert lines[0].endswith(" failed: its certificate is not signed by a CA in --tls-ca"), lines
    assert "C:1" not in db.snapshot()["received"]


@pytest.mark.parametrize("mode", ["flip", "replay"])
def test_a_link_record_altered_or_replayed_in_flight_is_refused_in_one_line(
        tmp_path, pki, mode: str) -> None:  # type: ignore[no-untyped-def]
    ours = pki[0]
    said: list[str] = []
    records: list[object] = []

    async def known(_name: str) -> bool:
        return True

    async def scenario() -> None:
        server = LinkServer("B", tmp_path, b"s" * 32, 0, lambda _s: 0,
                            lambda _s, rec: records.append(rec), said.append, known=known,
                            tls=ours.tls())
        server.sock = socket.create_server(("127.0.0.1", 0))
        await server.open()
        relay = Relay(server.sock.getsockname()[1])
        port = await relay.start()
        reader, writer, last = await open_link("127.0.0.1", port, b"s" * 32, "A", "B",
                                               ours.tls())
        assert last == 0
        relay.arm(mode)
        writer.write(encode_record(0, CONTROL_SEQ, Rpc(7, 1, b"\x01").encode()))  # an Impulse
        try:  # closed, after the receiver's alert
            assert await asyncio.wait_for(reader.read(100), 10) == b""
        except ssl.SSLError as err:
            assert err.reason == "SSLV3_ALERT_BAD_RECORD_MAC"
        server.close()

    asyncio.run(scenario())
    assert said == ["link from A closed: a record failed its integrity check (altered, "
                    "replayed or cut in transit)"]
    # The original of a replayed record arrives once; an altered one never.
    assert len(records) == (1 if mode == "replay" else 0)
