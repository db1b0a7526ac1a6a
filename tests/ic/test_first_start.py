"""First start and recovery of a standalone instance, over real sockets, byte for byte."""

from __future__ import annotations

from pathlib import Path

from ambrosia_core.wire import (
    CONTROL_SEQ,
    InitialMessage,
    OutgoingRpc,
    Rpc,
    RpcType,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    encode_control_record,
    encode_record,
)
from tests.launcher import wait_until

from .conftest import Harness


def test_first_start_echoes_initial_message_and_logs_self_calls(harness: Harness) -> None:
    reg = harness.register("alpha")
    harness.start("alpha")
    b = harness.connect("alpha")
    rec, raw = b.record()
    assert raw == encode_control_record(reg.committer_id, TakeBecomingPrimaryCheckpoint())
    b.send(InitialMessage(b"hello"))
    b.send_checkpoint(b"state-0")
    rec, raw = b.record()
    assert raw == encode_record(reg.committer_id, 0, InitialMessage(b"hello").encode())
    b.send(OutgoingRpc("", 7, RpcType.FORK, b"self-call"))
    rec, raw = b.record()
    assert raw == encode_record(reg.committer_id, 1, Rpc(7, RpcType.FORK, b"self-call").encode())
    b.send(OutgoingRpc("alpha", 8, RpcType.IMPULSE, b"impulse"))
    rec, raw = b.record()
    assert rec.seq_id == 2 and rec.messages == [Rpc(8, RpcType.IMPULSE, b"impulse")]
    d = harness.instance_dir("alpha")
    assert sorted(p.name for p in d.iterdir() if p.name.startswith("server")) == [
        "serverchkpt1", "serverdigest1", "serverlock", "serverlog1"]


def _server_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()
                  if p.name.startswith(("serverlog", "serverchkpt", "serverdigest")))


def _run_chain(d, start: int, stop: int) -> None:  # type: ignore[no-untyped-def]
    """Impulses one at a time: each makes a self-call, which makes an acknowledgement."""
    for k in range(start, stop):
        d.impulse(k)
        wait_until(lambda k=k: len(d.snapshot()["acked"]) == k + 1, f"ack {k}")


def test_checkpoint_kill9_and_recovery_replay_the_same_records(harness: Harness) -> None:
    reg = harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 4)
    d1.b.send(TakeCheckpoint())  # the binding asks for a checkpoint: [02 02]
    wait_until(lambda: "take-checkpoint" in d1.events, "TakeCheckpoint")
    idir = harness.instance_dir("alpha")
    wait_until(lambda: (idir / "serverchkpt2").exists(), "checkpoint 2")
    # The default keeps the last 2 checkpoints with their logs.
    assert _server_files(idir) == ["serverchkpt1", "serverchkpt2", "serverdigest1",
                                   "serverdigest2", "serverlog1", "serverlog2"]
    _run_chain(d1, 4, 8)
    before = d1.snapshot()
    harness.kill9(proc)
    d1.thread.join(30)

    proc2 = harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    assert d2.events == ["checkpoint-loaded", "take-becoming-primary-checkpoint"]
    mark = d1.marks["take-checkpoint"]
    assert d2.records == d1.records[mark:]  # the same records, byte for byte
    assert d2.snapshot() == before
    # The replayed self-calls and acks were dropped as duplicates; new work continues
    # with the next sequence id.
    _run_chain(d2, 8, 10)
    after = d2.snapshot()
    assert after["sent"] == [f"alpha:{k}" for k in range(10)]
    assert after["received"] == after["sent"] and after["acked"] == after["sent"]
    assert d2.parsed[-1].seq_id == d1.parsed[-1].seq_id + 6
    assert d2.parsed[-1].committer_id == reg.committer_id
    wait_until(lambda: not (idir / "serverchkpt1").exists(), "checkpoint 1 removed")
    assert _server_files(idir) == ["serverchkpt2", "serverchkpt3", "serverdigest2",
                                   "serverdigest3", "serverlog2", "serverlog3"]
    assert proc2.poll() is None


def test_binding_disconnect_stops_the_coordinator(harness: Harness) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    d.b.close()
    assert proc.wait(30) == 1
    # Said to be a failure, as the exit code says: a stop and a crash look the same here.
    assert ("the binding closed its connection; exiting with code 1, a failure: a binding "
            "that stopped and one that crashed look the same here") in harness.stderr_of(proc)


def test_malformed_bytes_close_and_nothing_durable_is_lost(harness: Harness) -> None:
    harness.register("alpha")
    proc = harness.start("alpha")
    d1 = harness.drive("alpha")
    wait_until(d1.primary.is_set, "primary")
    _run_chain(d1, 0, 3)
    before = d1.snapshot()
    d1.b.send_raw(b"\x06\x63garbage")  # message type 0x63 does not exist
    assert proc.wait(30) == 2
    err = harness.stderr_of(proc).strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ambrosia-ic: alpha: binding sent malformed bytes:")
    d1.thread.join(30)
    assert d1.b.closed
    harness.start("alpha")
    d2 = harness.drive("alpha")
    wait_until(d2.primary.is_set, "primary after recovery")
    assert d2.snapshot() == before
    assert d2.records == d1.records


def test_first_start_control_record_bytes(harness: Harness) -> None:
    reg = harness.register("alpha")
    harness.start("alpha")
    b = harness.connect("alpha")
    rec, raw = b.record()
    assert rec.seq_id == CONTROL_SEQ
    assert raw[4:8] == (24 + 2).to_bytes(4, "little") and raw[24:] == b"\x02\x0b"
    assert raw[:4] == reg.committer_id.to_bytes(4, "little", signed=True)


def test_log_trigger_size_makes_the_coordinator_ask_for_a_checkpoint(harness: Harness) -> None:
    harness.register("alpha", log_trigger_size_mb=1)
    harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    big = b"ack:" + b"x" * (256 * 1024)
    for _ in range(5):  # 1.25 MB of Impulses
        d.b.send(OutgoingRpc("", 2, RpcType.IMPULSE, big))
    wait_until(lambda: "take-checkpoint" in d.events, "a TakeCheckpoint")
    idir = harness.instance_dir("alpha")
    wait_until(lambda: (idir / "serverchkpt2").exists(), "checkpoint 2")
    # Right after the record that took the log past 1 MB (on disk each record also
    # carries 2 bytes of empty watermarks).
    sizes = [len(r) + 2 for r in d.records[: d.marks["take-checkpoint"]]]
    assert sum(sizes[:-1]) < 1 << 20 <= sum(sizes)
