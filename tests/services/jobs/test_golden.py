"""Golden byte vectors for every job protocol message, checked in both directions.

Every vector was written by hand from the layout in ``services/ambrosia_services/jobs/README.md``:
``U32 length | U8 type | body``, big-endian, where length counts the type byte and the
body; a job id is the initiator's 16 UUID bytes then a U64 local id; text is a U16 length
then UTF-8. Each vector is encoded, decoded whole and one byte at a time, and sent and
received through a pair of connections for every link that may carry it (and refused on
every link that may not).
"""

from __future__ import annotations

import pytest
from ambrosia_services.jobs import (
    LINK_MESSAGES,
    Batch,
    Cancel,
    Check,
    CheckResponse,
    FlowControl,
    JobConnection,
    JobId,
    JobLocalError,
    JobMessage,
    JobMessageDirectionError,
    MessageType,
    Role,
    Start,
    encode,
)

from .helpers import (
    I_HEX,
    INITIATOR,
    JOB,
    JOB_HEX,
    OTHER,
    OTHER_HEX,
    P1,
    P1_HEX,
    P2,
    P2_HEX,
    decode_all,
    h,
    one_byte_at_a_time,
    receive_all,
)

JOB8 = JobId(INITIATOR, 8)

VECTORS: list[tuple[str, str, JobMessage]] = [
    # start: 24 job id + 2 count + 32 members + 2+9 name + 16 msgpack = 85 body -> 86 = 0x56
    (
        "start",
        "00000056 01 " + JOB_HEX + " 0002 " + P1_HEX + " " + P2_HEX
        + " 0009 776F7264636F756E74"  # "wordcount"
        + " 82 A4 70617468 A6 696E2E747874 A1 6E 02",  # {"path": "in.txt", "n": 2}
        Start(JOB, "wordcount", {"path": "in.txt", "n": 2}, [P1, P2]),
    ),
    # start with empty params (msgpack fixmap 0 = 80): 24+2+16+2+1+1 = 46 -> 0x2F
    (
        "start_empty_params",
        "0000002F 01 " + JOB_HEX + " 0001 " + P1_HEX + " 0001 6A 80",
        Start(JOB, "j", {}, [P1]),
    ),
    # cancel requested by P1: 24 + 16 + 4 + 2+13 = 59 -> 0x3C
    (
        "cancel_request",
        "0000003C 02 " + JOB_HEX + " " + P1_HEX + " 00000003 000D 72756E6E6572206661696C6564",
        Cancel(JOB, P1, 3, "runner failed"),
    ),
    # cancel by the initiator, negative code, two-byte UTF-8 "é": 24+16+4+2+6 = 52 -> 0x35
    (
        "cancel_broadcast",
        "00000035 02 " + JOB_HEX + " " + I_HEX + " FFFFFFFE 0006 64C3A96C6169",
        Cancel(JOB, INITIATOR, -2, "délai"),
    ),
    # batch: 24 + 4 edge + 8 number + 1 flags + 6 rows = 43 -> 0x2C
    (
        "batch",
        "0000002C 03 " + JOB_HEX + " 00000000 0000000000000000 00 68656C6C6F0A",
        Batch(JOB, 0, 0, b"hello\n"),
    ),
    # an empty last batch on edge 1: 37 -> 0x26
    (
        "batch_last_empty",
        "00000026 03 " + JOB_HEX + " 00000001 0000000000000000 01",
        Batch(JOB, 1, 0, b"", last=True),
    ),
    # every byte of edge and number distinct, so a swapped field shows: 38 -> 0x27
    (
        "batch_wide_fields",
        "00000027 03 " + JOB_HEX + " 0A0B0C0D 0102030405060708 01 FF",
        Batch(JOB, 0x0A0B0C0D, 0x0102030405060708, b"\xff", last=True),
    ),
    # flow_control: 24 + 4 + 8 = 36 -> 0x25
    (
        "flow_control",
        "00000025 04 " + JOB_HEX + " 00000000 0000000000001000",
        FlowControl(JOB, 0, 4096),
    ),
    (
        "flow_control_max",
        "00000025 04 " + JOB_HEX + " 00000003 FFFFFFFFFFFFFFFF",
        FlowControl(JOB, 3, 2**64 - 1),
    ),
    # check: 4 count + 2 x 24 = 52 -> 0x35
    (
        "check",
        "00000035 05 00000002 " + JOB_HEX + " " + I_HEX + " 0000000000000008",
        Check([JOB, JOB8]),
    ),
    ("check_empty", "00000005 05 00000000", Check([])),
    # check_response: 4 + 24 + 4 + 48 = 80 -> 0x51
    (
        "check_response",
        "00000051 06 00000001 " + JOB_HEX + " 00000002 " + I_HEX + " 0000000000000008 "
        + OTHER_HEX + " 0000000000000102",
        CheckResponse([JOB], [JOB8, JobId(OTHER, 0x102)]),
    ),
    ("check_response_empty", "00000009 06 00000000 00000000", CheckResponse([], [])),
]

IDS = [v[0] for v in VECTORS]
LINKS = [
    (Role.INITIATOR, Role.PARTICIPANT),
    (Role.PARTICIPANT, Role.INITIATOR),
    (Role.PARTICIPANT, Role.PARTICIPANT),
]


def test_every_message_type_has_a_vector() -> None:
    types = {encode(msg)[4] for _, _, msg in VECTORS}
    assert types == {int(t) for t in MessageType}


@pytest.mark.parametrize(("name", "hex_", "msg"), VECTORS, ids=IDS)
def test_encode(name: str, hex_: str, msg: JobMessage) -> None:
    assert encode(msg) == h(hex_)


@pytest.mark.parametrize(("name", "hex_", "msg"), VECTORS, ids=IDS)
def test_decode_whole_and_one_byte_at_a_time(name: str, hex_: str, msg: JobMessage) -> None:
    data = h(hex_)
    for pieces in ([data], one_byte_at_a_time(data)):
        got = decode_all(pieces)
        assert got == [msg]
        assert type(got[0]) is type(msg)


def test_all_vectors_in_one_stream_one_byte_at_a_time() -> None:
    stream = b"".join(h(x) for _, x, _ in VECTORS)
    assert decode_all(one_byte_at_a_time(stream)) == [m for _, _, m in VECTORS]


# A fresh stream starts at batch 0, so the vector with a large batch number is left out.
FIRST_OF_STREAM = [v for v in VECTORS if not (isinstance(v[2], Batch) and v[2].number)]


@pytest.mark.parametrize(
    ("name", "hex_", "msg"), FIRST_OF_STREAM, ids=[v[0] for v in FIRST_OF_STREAM]
)
@pytest.mark.parametrize(("sender", "receiver"), LINKS, ids=lambda r: r.name.lower())
def test_both_ways_through_connections(
    name: str, hex_: str, msg: JobMessage, sender: Role, receiver: Role
) -> None:
    out = JobConnection(sender, receiver)
    into = JobConnection(receiver, sender)
    data = h(hex_)
    legal = int(data[4]) in LINK_MESSAGES[(sender, receiver)]
    if legal:
        assert out.send(msg) == data
        assert receive_all(into, one_byte_at_a_time(data)) == [msg]
        return
    with pytest.raises(JobLocalError) as refused:
        out.send(msg)
    kind = MessageType(data[4]).name.lower()
    assert str(refused.value) == (
        f"a {sender.name.lower()} may not send {kind} to a {receiver.name.lower()}"
    )
    with pytest.raises(JobMessageDirectionError) as err:
        receive_all(into, [data])
    assert str(err.value) == (
        f"{kind} may not travel from {sender.name.lower()} to {receiver.name.lower()} "
        f"(offset 0, message type {data[4]})"
    )
