"""Every byte of a stored record is covered by check bytes: a flipped bit anywhere in one
(header, body, watermarks, epoch, the check bytes themselves) is damage, never a valid
record with other contents and never a torn tail that a recovery would cut off; a write
cut short is still a torn tail."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import xxhash
from ambrosia_ic.errors import LogCorruptionError
from ambrosia_ic.logstore import LogScan, encode_disk_record, scan_log
from ambrosia_ic.replication.raft import decode_record

CID = 1234

# Record 3 of committer 7, body 03 00 01, one input watermark (peer: 9), without and with
# an active/active epoch (2). The header's check bytes are XXH64 of the body; the record's
# own, the last 8 bytes, XXH64 of the header and the watermarks before them, top bit set.
GOLDEN = {
    None: bytes.fromhex(
        "07000000" "e4ffffff" "06caebdcd35b3ef9" "0300000000000000"  # header, stored length
        "030001"  # body
        "02" "08" "70656572" "0900000000000000" "0900000000000000"  # one input: peer 9 9
        "02" "0c" "23636865636b"  # one trim entry: #check
        "6b2fdb110a3104fe"),  # its value
    2: bytes.fromhex(
        "07000000" "e4ffffff" "06caebdcd35b3ef9" "0300000000000000" "030001"
        "02" "08" "70656572" "0900000000000000" "0900000000000000"
        "04" "0c" "2365706f6368" "0200000000000000"  # two trim entries: #epoch 2,
        "0c" "23636865636b" "7ba0d3dc2b28aa96"),  # then #check
}


@pytest.mark.parametrize("epoch", [None, 2])
def test_a_stored_record_is_exactly_these_bytes(epoch: int | None) -> None:
    disk, wire = encode_disk_record(7, 3, b"\x03\x00\x01", {"peer": 9}, epoch)
    assert disk == GOLDEN[epoch]
    assert wire == b"\x07\0\0\0\x1b\0\0\0" + disk[8:27]  # positive length, no watermarks
    header, marks = disk[:24], disk[27:-8]
    assert xxhash.xxh64_intdigest(disk[24:27]) == int.from_bytes(disk[8:16], "little")
    assert xxhash.xxh64_intdigest(header + marks) | 1 << 63 == int.from_bytes(disk[-8:],
                                                                                "little")


def _records(epoch: int | None) -> list[bytes]:
    return [encode_disk_record(CID, i, b"\x04\x00\x00\x02" + bytes([i + 1]) * 40,
                               {"peer": i + 1, "other": 5}, epoch)[0] for i in range(3)]


@pytest.mark.parametrize("tail", [0, 300], ids=["file-ends", "zeros-follow"])
@pytest.mark.parametrize("epoch", [None, 4])
@pytest.mark.parametrize("victim", [0, 1, 2])
def test_every_flipped_bit_of_a_record_is_damage_at_that_record(
        tmp_path: Path, victim: int, epoch: int | None, tail: int) -> None:
    recs = _records(epoch)
    data = b"".join(recs) + bytes(tail)
    start = sum(map(len, recs[:victim]))
    path = tmp_path / "serverlog1"
    for i in range(len(recs[victim])):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[start + i] ^= 1 << bit
            path.write_bytes(flipped)
            # As ``log dump`` reads a log: no committer id or first sequence id known,
            # a torn tail allowed.
            with pytest.raises(LogCorruptionError) as info:
                scan_log(path)
            assert info.value.offset in (start, start + 24 + 44), (i, bit)  # header, marks
            assert info.value.path == str(path)


def test_a_flipped_length_names_the_record_that_follows(tmp_path: Path) -> None:
    recs = _records(None)
    data = bytearray(b"".join(recs))
    data[len(recs[0]) + 6] ^= 0x01  # record 1 claims to run past the end of the file
    path = tmp_path / "serverlog1"
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError, match=f"record 2 follows at offset "
                       f"{len(recs[0]) + len(recs[1])}"):
        scan_log(path)


@pytest.mark.parametrize("tail", [0, 300], ids=["file-ends", "zeros-follow"])
@pytest.mark.parametrize("epoch", [None, 4])
def test_every_write_cut_short_is_still_a_torn_tail(
        tmp_path: Path, epoch: int | None, tail: int) -> None:
    recs = _records(epoch)
    head = b"".join(recs[:2])
    path = tmp_path / "serverlog1"
    for cut in range(1, len(recs[2])):
        missing = len(recs[2]) - cut
        path.write_bytes(head + recs[2][:cut] + (bytes(missing + tail) if tail else b""))
        got, scan = scan_log(path, first_seq=0, committer_id=CID)
        if len(got) == 3:  # what was missing was zeros anyway
            assert recs[2].endswith(bytes(missing)) and tail, cut
        else:
            assert [r.seq_id for r in got] == [0, 1] and scan.torn_at == len(head), cut
        with pytest.raises(LogCorruptionError, match="incomplete record at the end of a "
                           "closed log") if len(got) == 2 else contextlib.nullcontext():
            list(LogScan(path, allow_torn_tail=False, first_seq=0))


@pytest.mark.parametrize("epoch", [None, 4])
def test_a_raft_entry_with_any_flipped_bit_is_refused(epoch: int | None) -> None:
    disk = _records(epoch)[1]
    assert decode_record(disk, 9).inputs == {"peer": 2, "other": 5}
    for i in range(len(disk)):
        for bit in range(8):
            flipped = bytearray(disk)
            flipped[i] ^= 1 << bit
            with pytest.raises(LogCorruptionError, match="raft log"):
                decode_record(bytes(flipped), 9)
