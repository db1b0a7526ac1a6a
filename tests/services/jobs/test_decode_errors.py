"""Malformed frames: each raises one typed error with an exact one-line message, and the
decoder stays broken afterwards."""

from __future__ import annotations

import pytest
from ambrosia_services.jobs import (
    NEED_DATA,
    FrameDecoder,
    JobFrameTooLargeError,
    JobLocalError,
    JobRemoteError,
    JobWireError,
    UnknownJobMessageTypeError,
)

from .helpers import I_HEX, JOB_HEX, P1_HEX, h

BAD = [
    ("zero_length", "00000000", JobWireError,
     "frame length 0 has no room for the type byte (offset 0)"),
    ("unknown_type", "00000001 07", UnknownJobMessageTypeError,
     "unknown job message type 7 (offset 0, message type 7)"),
    ("type_zero", "00000001 00", UnknownJobMessageTypeError,
     "unknown job message type 0 (offset 0, message type 0)"),
    ("flow_control_zero_credit", "00000025 04 " + JOB_HEX + " 00000000 0000000000000000",
     JobWireError,
     "flow_control: credits 0 is out of range for a U64 credit grant "
     "(1..18446744073709551615) (offset 0, message type 4)"),
    ("flow_control_trailing", "00000026 04 " + JOB_HEX + " 00000000 0000000000000001 00",
     JobWireError, "flow_control has 1 bytes after its last field (offset 0, message type 4)"),
    ("flow_control_short", "00000024 04 " + JOB_HEX + " 00000000 00000000000001",
     JobWireError,
     "flow_control is cut short: flow control needs 36 bytes, 35 remain "
     "(offset 0, message type 4)"),
    ("batch_unknown_flag", "00000026 03 " + JOB_HEX + " 00000000 0000000000000000 02",
     JobWireError,
     "batch: flags 0x02 set bits other than last (0x01) (offset 0, message type 3)"),
    ("cancel_trailing", "00000030 02 " + JOB_HEX + " " + P1_HEX + " 00000001 0000 00",
     JobWireError, "cancel has 1 bytes after its last field (offset 0, message type 2)"),
    ("cancel_bad_utf8", "00000030 02 " + JOB_HEX + " " + P1_HEX + " 00000001 0001 FF",
     JobWireError, "cancel: error message is not valid UTF-8 (offset 0, message type 2)"),
    ("check_count_too_big", "00000005 05 00000001", JobWireError,
     "check is cut short: 1 job ids need 24 bytes, 0 remain (offset 0, message type 5)"),
    ("check_duplicate", "00000035 05 00000002 " + JOB_HEX + " " + JOB_HEX, JobWireError,
     "check: job_ids names a job twice (offset 0, message type 5)"),
    ("check_response_both", "00000039 06 00000001 " + JOB_HEX + " 00000001 " + JOB_HEX,
     JobWireError,
     "check_response: job " + "00112233-4455-6677-8899-aabbccddeeff/7"
     + " is listed as both active and inactive (offset 0, message type 6)"),
    ("start_no_participants", "0000001F 01 " + JOB_HEX + " 0000 0001 6A 80", JobWireError,
     "start: a job needs at least one participant (offset 0, message type 1)"),
    ("start_twice_the_same_member",
     "0000003F 01 " + JOB_HEX + " 0002 " + P1_HEX + " " + P1_HEX + " 0001 6A 80",
     JobWireError, "start: participants name a member twice (offset 0, message type 1)"),
    ("start_empty_name", "0000002E 01 " + JOB_HEX + " 0001 " + P1_HEX + " 0000 80",
     JobWireError, "start: a job name must not be empty (offset 0, message type 1)"),
    ("start_params_not_a_map", "0000002F 01 " + JOB_HEX + " 0001 " + P1_HEX + " 0001 6A 01",
     JobWireError,
     "start: params are not a plain map: params must be a map, got int "
     "(offset 0, message type 1)"),
    ("start_params_two_values",
     "00000030 01 " + JOB_HEX + " 0001 " + P1_HEX + " 0001 6A 80 80", JobWireError,
     "start: 1 bytes follow the params value (offset 0, message type 1)"),
    ("start_params_cut", "0000002F 01 " + JOB_HEX + " 0001 " + P1_HEX + " 0001 6A 81",
     JobWireError,
     "start: params are not valid msgpack (or have a non-str key) "
     "(offset 0, message type 1)"),
    ("start_params_int_key",
     "00000031 01 " + JOB_HEX + " 0001 " + P1_HEX + " 0001 6A 81 01 02", JobWireError,
     "start: params are not valid msgpack (or have a non-str key) "
     "(offset 0, message type 1)"),
]


@pytest.mark.parametrize(("name", "hex_", "kind", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_frame(name: str, hex_: str, kind: type[Exception], message: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(h(hex_))
    with pytest.raises(kind) as err:
        decoder.next_message()
    assert str(err.value) == message
    assert type(err.value) is kind
    # Broken for good: the same error again, whatever comes next.
    with pytest.raises(kind):
        decoder.receive_data(b"\x00")
    with pytest.raises(kind):
        decoder.next_message()


def test_error_offset_counts_from_the_start_of_the_stream() -> None:
    good = h("00000005 05 00000000")
    decoder = FrameDecoder()
    decoder.receive_data(good + good + h("00000001 09"))
    assert decoder.next_message() is not NEED_DATA
    assert decoder.next_message() is not NEED_DATA
    with pytest.raises(UnknownJobMessageTypeError) as err:
        decoder.next_message()
    assert str(err.value) == "unknown job message type 9 (offset 18, message type 9)"
    assert err.value.offset == 18


def test_frame_too_large_is_refused_when_its_length_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=64)
    decoder.receive_data(h("000000"))
    assert decoder.next_message() is NEED_DATA
    decoder.receive_data(h("41"))  # 65: no byte of its body has arrived
    with pytest.raises(JobFrameTooLargeError) as err:
        decoder.next_message()
    assert str(err.value) == "frame length 65 exceeds the limit of 64 bytes (offset 0)"


def test_a_frame_of_exactly_the_limit_is_accepted() -> None:
    # A check with two ids is 53 bytes long; limit it to exactly that.
    frame = h("00000035 05 00000002 " + JOB_HEX + " " + I_HEX + " 0000000000000008")
    decoder = FrameDecoder(max_frame_size=64)
    decoder.receive_data(frame)
    assert decoder.next_message() is not NEED_DATA


def test_unparsed_input_is_bounded() -> None:
    decoder = FrameDecoder(max_frame_size=64)
    frame = h("00000005 05 00000000")
    with pytest.raises(JobFrameTooLargeError) as err:
        for _ in range(200_000):  # never drained
            decoder.receive_data(frame)
    assert str(err.value).startswith("unparsed input exceeds the frame bound")


def test_max_frame_size_has_a_floor() -> None:
    with pytest.raises(ValueError, match="at least 64 bytes"):
        FrameDecoder(max_frame_size=63)


def test_every_error_is_the_libraries_remote_or_local_kind() -> None:
    # The base classes callers catch: the peer's fault vs ours.
    assert issubclass(JobWireError, JobRemoteError)
    assert not issubclass(JobLocalError, JobRemoteError)
