"""The one checkpoint-collection path, fed the binding's messages in memory: what it
hands back, and what it refuses."""

from __future__ import annotations

import asyncio

import pytest
from ambrosia_ic.coordinator.checkpoints import CheckpointCollector

from ambrosia_py.wire import Checkpoint


def test_a_checkpoint_is_collected_whole_in_order() -> None:
    async def run() -> tuple[int | None, int, object, int | None]:
        collector = CheckpointCollector()
        fut = collector.expect(7)
        asked = collector.expecting
        n = collector.begin(Checkpoint(5), {"alpha": {"next": 3, "unacked": []}})
        collector.chunk(b"abc")
        collector.chunk(b"de")
        assert not fut.done()  # nothing before the end of the stream
        collector.end()
        return asked, n, await fut, collector.expecting

    asked, n, data, after = asyncio.run(run())
    assert (asked, n, after) == (7, 7, None)
    assert data == (Checkpoint(5).encode(), [b"abc", b"de"],
                    {"alpha": {"next": 3, "unacked": []}})


def test_nothing_is_expected_before_a_request() -> None:
    assert CheckpointCollector().expecting is None


@pytest.mark.parametrize("n", [1, 12])
def test_the_number_asked_for_is_the_number_begun(n: int) -> None:
    async def run() -> int:
        collector = CheckpointCollector()
        collector.expect(n)
        return collector.begin(Checkpoint(0), {})

    assert asyncio.run(run()) == n
