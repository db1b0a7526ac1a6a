"""The protocol without I/O, exact bytes both ways, and the state's rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ambrosia_services.kcl import ChildSession, KclCore, KclRecord, Protocol
from ambrosia_services.kcl.config import ProcessorConfigError, processors_from_config
from ambrosia_services.kcl.protocol import (
    NO_CHECKPOINT,
    CheckpointAsk,
    Reply,
    Skipped,
    StatusDone,
    Violation,
)
from ambrosia_services.staging import Ref

R1 = KclRecord(7, b"k", b"hi", 1700000000123)
R2 = KclRecord(9, b"", b"\x00\xff", 1700000000124)


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def test_current_protocol_golden_lines() -> None:
    s = ChildSession(Protocol.CURRENT, "orders", 5)
    assert s.initialize() == (b'{"action":"initialize","shardId":"orders",'
                              b'"sequenceNumber":"5","subSequenceNumber":0}\n')
    assert s.receive_line(b'\n{"action": "status", "responseFor": "initialize"}\n'
                          ) == StatusDone("initialize")
    assert s.process_records([R1, R2]) == (
        b'{"action":"processRecords","records":['
        b'{"action":"record","data":"aGk=","partitionKey":"k","sequenceNumber":"7",'
        b'"subSequenceNumber":0,"approximateArrivalTimestamp":1700000000123},'
        b'{"action":"record","data":"AP8=","partitionKey":"","sequenceNumber":"9",'
        b'"subSequenceNumber":0,"approximateArrivalTimestamp":1700000000124}],'
        b'"millisBehindLatest":0}\n')
    ask = s.receive_line(line({"action": "checkpoint", "sequenceNumber": "7",
                               "subSequenceNumber": 0}))
    assert ask == CheckpointAsk(7, False)
    assert s.answer() == (b'{"action":"checkpoint","sequenceNumber":"7",'
                          b'"subSequenceNumber":0}\n')
    assert s.receive_line(line({"action": "checkpoint", "sequenceNumber": None,
                                "subSequenceNumber": None})) == CheckpointAsk(9, False)
    assert s.answer("IllegalArgumentException") == (
        b'{"action":"checkpoint","sequenceNumber":"9","subSequenceNumber":0,'
        b'"error":"IllegalArgumentException"}\n')
    assert s.receive_line(line({"action": "status", "responseFor": "processRecords"})
                          ) == StatusDone("processRecords")
    assert s.shard_ended() == b'{"action":"shardEnded"}\n'
    assert s.receive_line(line({"action": "checkpoint", "sequenceNumber": None})
                          ) == CheckpointAsk(9, True)


def test_current_protocol_first_start_and_other_ends() -> None:
    s = ChildSession(Protocol.CURRENT, "s", NO_CHECKPOINT)
    assert s.initialize() == (b'{"action":"initialize","shardId":"s","sequenceNumber":null,'
                              b'"subSequenceNumber":null}\n')
    s.receive_line(line({"action": "status", "responseFor": "initialize"}))
    assert s.shutdown_requested() == b'{"action":"shutdownRequested"}\n'
    s.receive_line(line({"action": "status", "responseFor": "shutdownRequested"}))
    assert s.lease_lost() == b'{"action":"leaseLost"}\n'


def test_older_protocol_golden_lines() -> None:
    """The KCL 1.x daemon's version: the same messages (amazon-kclpy 1.5.1 needs every
    field), the end as shutdown TERMINATE or ZOMBIE, and a checkpoint answered in the form
    it was asked in: ``checkpoint`` (kclpy before 1.4) or ``sequenceNumber`` (1.4 on)."""
    s = ChildSession(Protocol.SHUTDOWN, "legacy", 5)
    assert s.initialize() == (b'{"action":"initialize","shardId":"legacy",'
                              b'"sequenceNumber":"5","subSequenceNumber":0}\n')
    s.receive_line(line({"action": "status", "responseFor": "initialize"}))
    assert s.process_records([R1]) == (
        b'{"action":"processRecords","records":['
        b'{"action":"record","data":"aGk=","partitionKey":"k","sequenceNumber":"7",'
        b'"subSequenceNumber":0,"approximateArrivalTimestamp":1700000000123}],'
        b'"millisBehindLatest":0}\n')
    assert s.receive_line(line({"action": "checkpoint", "checkpoint": "6"})
                          ) == CheckpointAsk(6, False)
    assert s.answer() == b'{"action":"checkpoint","checkpoint":"6"}\n'
    assert s.receive_line(line({"action": "checkpoint", "sequenceNumber": "7",
                                "subSequenceNumber": None})) == CheckpointAsk(7, False)
    assert s.answer() == b'{"action":"checkpoint","sequenceNumber":"7","subSequenceNumber":null}\n'
    s.receive_line(line({"action": "status", "responseFor": "processRecords"}))
    assert s.shard_ended() == b'{"action":"shutdown","reason":"TERMINATE"}\n'
    assert s.receive_line(line({"action": "checkpoint", "checkpoint": None})
                          ) == CheckpointAsk(7, True)
    assert s.answer("X") == b'{"action":"checkpoint","checkpoint":"7","error":"X"}\n'
    s.receive_line(line({"action": "status", "responseFor": "shutdown"}))
    assert s.shutdown_requested() == b'{"action":"shutdown","reason":"ZOMBIE"}\n'
    s.receive_line(line({"action": "status", "responseFor": "shutdown"}))
    # Refused by the session itself: in the form asked too.
    assert s.receive_line(line({"action": "checkpoint", "sequenceNumber": None,
                                "subSequenceNumber": None})) == Reply(
        b'{"action":"checkpoint","sequenceNumber":null,"subSequenceNumber":null,'
        b'"error":"ShutdownException"}\n',
        "checkpoint at None refused (ShutdownException; delivered up to 7, waiting for "
        "nothing)")


def test_current_protocol_answers_a_checkpoint_in_the_form_it_was_asked_in() -> None:
    s = fresh()
    assert s.receive_line(line({"action": "checkpoint", "checkpoint": None})
                          ) == CheckpointAsk(7, False)
    assert s.answer() == b'{"action":"checkpoint","checkpoint":"7"}\n'


def fresh(action: str = "processRecords") -> ChildSession:
    s = ChildSession(Protocol.CURRENT, "s", 3)
    s.initialize()
    if action == "initialize":
        return s
    s.receive_line(line({"action": "status", "responseFor": "initialize"}))
    s.process_records([R1])  # delivered up to 7
    if action == "leaseLost":
        s.receive_line(line({"action": "status", "responseFor": "processRecords"}))
        s.lease_lost()
    return s


@pytest.mark.parametrize("state, raw, want", [
    ("processRecords", b"   \n", None),
    ("processRecords", b"Encountered shutdown exception\n", Skipped),
    ("processRecords", b"[1, 2]\n", Skipped),
    ("processRecords", b'{"action": "dance"}\n', Skipped),
    ("processRecords", b'{"responseFor": "processRecords"}\n', Skipped),
    ("processRecords", b'{"action": "status"}\n', Skipped),
    ("processRecords", b'{"action": "status", "responseFor": "initialize"}\n', Violation),
    ("processRecords", b'{"action": "checkpoint", "sequenceNumber": "8"}\n',
     "IllegalArgumentException"),
    ("processRecords", b'{"action": "checkpoint", "sequenceNumber": "-1"}\n',
     "IllegalArgumentException"),
    ("processRecords", b'{"action": "checkpoint", "sequenceNumber": "seven"}\n',
     "IllegalArgumentException"),
    ("processRecords", b'{"action": "checkpoint", "sequenceNumber": true}\n',
     "IllegalArgumentException"),
    ("processRecords", b'{"action": "checkpoint", "sequenceNumber": 7}\n', CheckpointAsk),
    ("initialize", b'{"action": "checkpoint", "sequenceNumber": "3"}\n',
     "InvalidStateException"),
    ("leaseLost", b'{"action": "checkpoint", "sequenceNumber": "7"}\n', "ShutdownException"),
])
def test_child_lines(state: str, raw: bytes, want: Any) -> None:
    s = fresh(state)
    got = s.receive_line(raw)
    if isinstance(want, str):
        assert isinstance(got, Reply)
        assert json.loads(got.line)["error"] == want
        assert s.awaiting == state  # the action goes on
    elif want is None:
        assert got is None
    else:
        assert isinstance(got, want), got


def test_a_second_checkpoint_or_a_status_before_the_answer_is_a_violation() -> None:
    s = fresh()
    assert isinstance(s.receive_line(line({"action": "checkpoint", "sequenceNumber": "7"})),
                      CheckpointAsk)
    assert isinstance(s.receive_line(line({"action": "checkpoint", "sequenceNumber": "7"})),
                      Violation)
    assert isinstance(s.receive_line(line({"action": "status",
                                           "responseFor": "processRecords"})), Violation)
    s.answer()
    assert s.receive_line(line({"action": "status", "responseFor": "processRecords"})
                          ) == StatusDone("processRecords")
    assert isinstance(s.receive_line(line({"action": "status",
                                           "responseFor": "processRecords"})), Violation)


def test_the_session_refuses_to_send_while_a_status_is_due() -> None:
    s = fresh()
    with pytest.raises(RuntimeError, match="status of processRecords is due"):
        s.shard_ended()


def test_core_keeps_records_until_checkpointed_and_refuses_out_of_range() -> None:
    core = KclCore()
    core.configure(["a"])
    assert not core.retain(2, "b", [R1])  # no processor: nothing kept
    assert core.retain(1, "a", [R1, R2])
    assert core.retain(1, "a", [R1])  # a record at or below the last one is not kept again
    rec = core.streams[1]
    assert [r.sequence for r in rec.records] == [7, 9]
    assert core.checkpoint(1, 10, False) == "IllegalArgumentException"  # beyond the last
    assert core.checkpoint(1, 8, False) == ""
    assert (rec.checkpoint, [r.sequence for r in rec.records]) == (8, [9])
    assert core.checkpoint(1, 7, False) == "IllegalArgumentException"  # below the last
    assert core.checkpoint(1, 8, False) == ""  # the same again is fine
    assert core.checkpoint(3, 1, False) == "IllegalArgumentException"  # no such stream
    assert core.end_of_stream(1)
    assert core.checkpoint(1, 9, True) == ""
    assert (rec.finished, rec.records, rec.checkpoints, rec.refused) == (True, [], 3, 2)
    again = KclCore.from_state(core.to_state())
    assert again.to_state() == core.to_state() and again.status() == core.status()
    core.retain(1, "a", [KclRecord(12, b"", b"x", 0)])
    assert not rec.ended and not rec.finished
    core.configure([])
    assert rec.records == [] and rec.checkpoint == 9


def _ref(first: int, last: int, segment: str = "s-1.seg") -> Ref:
    return Ref(1, first, last, last - first + 1, 10, segment, 8, 99, 12345, 1)


def test_core_keeps_staged_blocks_until_a_checkpoint_covers_them_and_gives_them_back() -> None:
    core = KclCore()
    core.configure(["a"])
    assert core.retain_staged(2, "b", [_ref(1, 3)], 5) == []  # no processor: not kept
    b1, b2, b3 = _ref(1, 3), _ref(4, 8, "s-2.seg"), _ref(9, 9, "s-2.seg")
    assert core.retain_staged(1, "a", [b1, b2], 5) == [b1, b2]
    assert core.retain_staged(1, "a", [b2, b3], 6) == [b3]  # a block kept already: not again
    rec = core.streams[1]
    assert (rec.records, rec.last, rec.waiting) == ([], 9, True)
    assert [b.ref for b in rec.blocks_after(3)] == [b2, b3]
    assert core.checkpoint(1, 10, False) == "IllegalArgumentException"  # beyond the last
    assert core.checkpoint(1, 5, False) == ""  # inside b2: b1 goes, b2 stays
    assert core.take_dropped() == [b1] and core.take_dropped() == []
    assert [(b.ref, b.arrival_ms) for b in rec.blocks] == [(b2, 5), (b3, 6)]
    assert [b.ref for b in rec.blocks_after(rec.checkpoint)] == [b2, b3]
    again = KclCore.from_state(core.to_state())
    assert again.to_state() == core.to_state() and again.streams[1].blocks == rec.blocks
    assert core.checkpoint(1, 8, False) == ""
    assert core.take_dropped() == [b2]
    core.configure([])  # the processor removed: its blocks are let go
    assert core.take_dropped() == [b3] and rec.blocks == [] and not rec.waiting
    # A state written before staged blocks were kept loads as having none.
    old = core.to_state()
    old["streams"] = [entry[:8] for entry in old["streams"]]
    assert KclCore.from_state(old).streams[1].blocks == []


@pytest.mark.parametrize("table, message", [
    ({"kcl": 3}, "kcl must be a table"),
    ({"kcl": {"s": {}}}, "kcl.s.command must be a non-empty list"),
    ({"kcl": {"s": {"command": "p", "colour": 1}}}, "kcl.s: unknown key(s) colour"),
    ({"kcl": {"s": {"command": "p", "env": {"A": 1}}}}, "kcl.s.env must be a table"),
    ({"kcl": {"s": {"command": "p", "protocol": "v9"}}}, "kcl.s.protocol must be"),
    ({"kcl": {"s": {"command": "p", "timeout_seconds": 0}}}, "kcl.s.timeout_seconds must"),
    ({"kcl": {"s": {"command": "p", "batch_records": 0}}}, "kcl.s.batch_records must"),
])
def test_configuration_errors(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ProcessorConfigError, match=message.replace("(", r"\(").replace(
            ")", r"\)")):
        processors_from_config(table)


def test_configuration() -> None:
    (p,) = processors_from_config({"kcl": {"s": {"command": "python -u p.py 'a b'",
                                                 "protocol": "shutdown"}}})
    assert p.command == ("python", "-u", "p.py", "a b") and p.protocol is Protocol.SHUTDOWN
    assert processors_from_config({}) == []
