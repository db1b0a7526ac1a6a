"""A sink's answers without a socket (``sinkanswer``): one whole conversation over the file
store driven with no event loop, the refusals, and a store call that would wait."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from ambrosia_services.connectors import (
    Message,
    Notify,
    NotifyAck,
    Ok,
    Phase1,
    Phase2,
    ReplyUncommitted,
    TwoPCReply,
    Where,
)
from ambrosia_services.connectors.clients import FileSinkStore
from ambrosia_services.connectors.clients.sinkanswer import SinkRefusedError, answer, run_now
from ambrosia_services.connectors.clients.sinkmetrics import SinkCounts
from ambrosia_services.connectors.twopc import ListUncommitted


def test_a_conversation_over_the_file_store_needs_no_event_loop(tmp_path: Path) -> None:
    store, counts = FileSinkStore(tmp_path), SinkCounts()

    def say(event: object) -> list[object]:
        return run_now(answer(store, event, counts))  # type: ignore[arg-type]

    assert say(ListUncommitted(7)) == [ReplyUncommitted(7, ())]
    assert say(Notify(1, "out", 0)) == [NotifyAck(True, 1, 0)]
    assert say(Message(1, 0, b"one\n")) == []
    assert say(Phase1("t1", (Where(1, 0, 4),))) == [TwoPCReply("t1", True)]
    assert say(ListUncommitted(8)) == [ReplyUncommitted(8, ("t1",))]
    assert say(Phase2("t1", True)) == []
    assert (tmp_path / "committed").read_bytes() == b"one\n"
    assert (counts.prepared, counts.committed, counts.committed_bytes) == (1, 1, 4)
    store.close_files()


def test_what_a_sink_does_not_take_is_refused_in_one_line(tmp_path: Path) -> None:
    store = FileSinkStore(tmp_path)
    with pytest.raises(SinkRefusedError, match=r"^this sink takes stream 1 only, not 2$"):
        run_now(answer(store, Notify(2, "x", 0), SinkCounts()))
    with pytest.raises(SinkRefusedError, match=r"^this sink does not handle Ok$"):
        run_now(answer(store, Ok(1), SinkCounts()))
    store.close_files()


def test_a_coroutine_that_waits_is_not_run_without_a_loop() -> None:
    async def waits() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="needs an event loop"):
        run_now(waits())
