"""User-supplied checkpoints end to end: a state of several MiB written by the immortal's
own producer (chunks) or as one object, then kill -9 and recovery from the coordinator's
checkpoint with the same state."""

from __future__ import annotations

import hashlib

import pytest

from ambrosia_py import Immortal, ImmortalDefinitionError
from ambrosia_py.testing import checkpoints
from tests.launcher import Launcher, wait_until

from .apps import BLOB_SIZE, POKES, expected_blob

pytestmark = pytest.mark.integration


def _wait_for_checkpoint(launcher: Launcher, name: str, number: int) -> None:
    wait_until(lambda: max(checkpoints(name, launcher.home), default=0) >= number,
               f"checkpoint {number} of {name}")


@pytest.mark.parametrize(("cls", "loaded"), [
    ("StreamedBlob", "consumer read"),
    ("ObjectBlob", "load_state got"),
])
def test_a_large_state_survives_kill9_through_its_own_checkpoint(
        launcher: Launcher, cls: str, loaded: str) -> None:
    blob = expected_blob()
    want = f"{len(blob)} bytes sha256 {hashlib.sha256(blob).hexdigest()}"
    p = launcher.start(f"tests.runtime.apps:{cls}", "blob")
    assert p.wait_for(f"after {POKES} pokes").endswith(want)
    _wait_for_checkpoint(launcher, "blob", 2)  # the one fill() asked for, with the blob
    p.kill()
    p = launcher.start(f"tests.runtime.apps:{cls}", "blob")
    assert p.wait_for("primary with").endswith(f"primary with {POKES} pokes: {want}")
    line = p.wait_for(loaded)
    if cls == "StreamedBlob":
        chunks, size = (int(w) for w in line.split("consumer read ")[1].split()[::2][:2])
        assert size == 16 + BLOB_SIZE
        assert chunks >= BLOB_SIZE // 300_000  # streamed, never one piece
    else:
        assert line.endswith(f"load_state got {BLOB_SIZE} bytes")
    p.stop()


def test_checkpoint_pairs_must_be_overridden_together_and_not_mixed() -> None:
    with pytest.raises(ImmortalDefinitionError) as info:
        class OnlyProducer(Immortal):
            def checkpoint_producer(self):  # type: ignore[no-untyped-def]
                yield b""

        del OnlyProducer
    assert "checkpoint_producer and checkpoint_consumer must be overridden together" in str(
        info.value)
    with pytest.raises(ImmortalDefinitionError) as info:
        class Both(Immortal):
            def checkpoint_producer(self):  # type: ignore[no-untyped-def]
                yield b""

            def checkpoint_consumer(self, chunks):  # type: ignore[no-untyped-def]
                pass

            def checkpoint_state(self):  # type: ignore[no-untyped-def]
                return 1

            def load_state(self, state):  # type: ignore[no-untyped-def]
                pass

        del Both
    assert "not both" in str(info.value)
