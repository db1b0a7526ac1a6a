"""A follower's position in the shared log (``LogTail``) when its log is not there: not
yet made (it waits), or pruned under it by the checkpointing secondary (it stops in one
line, where it used to find nothing there for ever)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ambrosia_ic.coordinator import FencedSink
from ambrosia_ic.errors import MissingLogError
from ambrosia_ic.lease import Epochs
from ambrosia_ic.logstore import checkpoint_path, log_path
from ambrosia_ic.replication.log_tail import LogTail


def test_a_log_not_made_yet_is_waited_for(tmp_path: Path) -> None:
    log_path(tmp_path, 1).write_bytes(b"")
    tail = LogTail(tmp_path, 101, 2, 7)  # past log 1's seal, before log 2 exists
    assert tail.poll(lambda: 1) == ([], False)
    assert (tail.n, tail.offset, tail.next_seq) == (2, 0, 7)


def test_a_log_pruned_under_a_follower_stops_it_in_one_line(tmp_path: Path) -> None:
    for n in (1, 2, 3, 4):
        log_path(tmp_path, n).write_bytes(b"")
        checkpoint_path(tmp_path, n).write_bytes(b"")
    tail = LogTail(tmp_path, 101, 2, 7)  # a standby stalled in log 2
    # The checkpointing secondary saves checkpoint 4 and prunes (keeping 3 and 4).
    FencedSink(Epochs(tmp_path / "epochs")).remove_unkept(tmp_path, 1, ())
    assert not log_path(tmp_path, 2).exists()
    with pytest.raises(MissingLogError) as err:
        tail.poll(lambda: 1)
    assert str(err.value) == (
        f"{log_path(tmp_path, 2)}: missing: removed while this replica still had it to "
        "read (pruned: it fell further behind than the kept checkpoints reach); start it "
        "again to follow from the newest checkpoint")
