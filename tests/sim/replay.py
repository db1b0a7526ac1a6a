"""The replays ``World.check_replay`` compares states with: a fresh binding fed an
instance's oldest kept checkpoint (``SimDisk.replay_from``: the oldest with every log
after it, since pruning removes what comes before) and then every durable record of
its log after it.

An instance's log is checked more than once in a run (as it goes live after each
recovery, and at the end), and what was durable at one check is mostly the start of
what is durable at the next. So the binding of an instance's last replay is kept with
what it was fed: when the next replay begins with the same checkpoint (the same saved
object, for the same class and committer id) and the same records, byte for byte, that
binding reads only the records after them, as a binding reads its input in pieces
anyway; anything else (a checkpoint saved again, a record that differs or is gone)
starts a fresh binding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import attrs

from ambrosia_core.wire import encode_checkpoint_record
from ambrosia_py.runtime.engine import Engine

from .app import Rounds
from .disk import SavedCheckpoint

__all__ = ["Replays"]


@attrs.define
class _Kept:
    """A replay's binding and what it was fed."""

    app: type[Rounds]
    cid: int
    first: SavedCheckpoint
    chunks: list[bytes]
    wires: list[bytes]
    engine: Engine


class Replays:
    """Per instance, its last replay (``new_engine(name, cls)`` makes a binding)."""

    def __init__(self, new_engine: Callable[[str, type[Rounds]], Engine]) -> None:
        self._new_engine = new_engine
        self._kept: dict[str, _Kept] = {}

    def state(self, name: str, app: type[Rounds], cid: int, first: SavedCheckpoint,
              wires: list[bytes]) -> dict[str, Any] | None:
        """The state of a fresh binding of ``app`` for ``name`` that read ``first``
        and then ``wires`` (each a record's wire form, in log order)."""
        kept = self._kept.get(name)
        if (kept is not None and kept.app is app and kept.cid == cid
                and kept.first is first and kept.chunks is first.chunks
                and wires[:len(kept.wires)] == kept.wires):
            engine, todo = kept.engine, wires[len(kept.wires):]
        else:
            engine, todo = self._new_engine(name, app), wires
            engine.receive_data(encode_checkpoint_record(cid, sum(map(len, first.chunks)))
                                + b"".join(first.chunks))
        for wire in todo:
            engine.receive_data(wire)
        while engine.next_output() is not None:
            pass
        self._kept[name] = _Kept(app, cid, first, first.chunks, list(wires), engine)
        inst = engine.instance
        return None if inst is None else cast(Rounds, inst).observed()
