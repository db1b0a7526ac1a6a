"""Staged segments through a power cut: every block appended before a ``sync`` is whole
afterwards, also when the writer rolled over to a new segment in between (``sync`` only
reaches the current file, so the roll must sync the one it closes)."""

from __future__ import annotations

from ambrosia_services.staging import SegmentWriter, read_block

from .disk import PowerDisk


def test_blocks_synced_across_a_segment_roll_survive_a_cut(disk: PowerDisk) -> None:
    root = disk.mount / "staging"
    writer = SegmentWriter(root, "life", segment_bytes=4096)
    refs = [writer.append(1, 10 * i, 10 * i + 9, [b"x" * 300] * 10) for i in range(5)]
    assert len({r.segment for r in refs}) > 2  # rolled over more than once
    writer.sync()  # what the listener does before an Impulse names the blocks
    tail = writer.append(1, 50, 59, [b"y" * 300] * 10)  # appended, never synced
    writer.close()
    report = disk.restart()
    for ref in refs:
        block = read_block(root, ref)
        assert [bytes(p) for p in block.payloads()] == [b"x" * 300] * 10, "\n".join(report)
    assert any(tail.segment in line for line in report), report  # a cut dropped it
