from ambrosia_core.wire import (
    InitialMessage,
    LogRecordDecoder,
    TakeBecomingPrimaryCheckpoint,
    encode_control_record,
    encode_record,
)


def test_startup_records_decode_byte_by_byte():
    stream = encode_control_record(7, TakeBecomingPrimaryCheckpoint()) + encode_record(
        7, 0, InitialMessage(b"2.0.1").encode()
    )
    d = LogRecordDecoder()
    events = []
    for i in range(len(stream)):
        d.receive_data(stream[i : i + 1])
        events.extend(d.events())
    assert [e.seq_id for e in events] == [-1, 0]
    assert events[1].messages == [InitialMessage(b"2.0.1")]
