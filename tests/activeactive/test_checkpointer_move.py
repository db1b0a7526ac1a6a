"""The checkpointing secondary's move after a look at log N
(``replication.checkpointer.next_move``), as a table: every combination of what the look
found and what the directory holds."""

from __future__ import annotations

import itertools

from ambrosia_ic.replication.checkpointer import Move, next_move


def test_the_whole_table() -> None:
    want = {
        # (log N read whole, checkpoint N+1 exists, log N+1 exists): the move
        (False, False, False): Move.READ,
        (False, False, True): Move.READ,  # never a checkpoint short of log N's records
        (False, True, False): Move.READ,
        (False, True, True): Move.READ,
        (True, False, False): Move.WAIT,  # sealed; checkpoint N+1 only after log N+1
        (True, False, True): Move.CHECKPOINT,
        (True, True, False): Move.NEXT,
        (True, True, True): Move.NEXT,
    }
    got = {key: next_move(*key) for key in itertools.product((False, True), repeat=3)}
    assert got == want
