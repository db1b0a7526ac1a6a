"""Checkpoints (when and what; ``checkpoint`` knows the layout) and upgrades.

A checkpoint taken while no handler is suspended holds the state
(``JournalMode.QUIESCENT``); one taken while handlers are suspended holds the snapshot
from before the first of them began and the inputs handled since
(``JournalMode.PENDING``), which loading re-dispatches with outgoing sends suppressed to
rebuild the same suspended coroutines (see ``journal``).
"""

from __future__ import annotations

import io
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any

import msgpack

from ambrosia_core.errors import LocalProtocolError
from ambrosia_py.errors import AlreadyUpgradedError, SerializationError

from . import checkpoint as ckpt
from .core import EngineCore
from .journal import JournalMode, input_from_wire

__all__ = ["Lifecycle"]


class Lifecycle(EngineCore):
    """Checkpoints written and loaded, and upgrades (a room of ``Engine``)."""

    def _framework_state(self) -> dict[str, Any]:
        return {"next_call_id": self._next_call_id, "last_ts": self._last_ts,
                "inputs_seen": self._inputs_seen}

    def _state_bytes(self) -> bytes:
        assert self.instance is not None
        return ckpt.state_bytes(self.instance, self._framework_state())

    def write_checkpoint(self) -> tuple[IO[bytes], int]:
        """The checkpoint, in a (spooled) temporary file positioned at 0, and its size."""
        began = time.perf_counter()
        f = tempfile.SpooledTemporaryFile(max_size=ckpt.SPOOL_MAX)  # noqa: SIM115 - caller closes
        assert self.instance is not None
        try:
            if self.handlers.suspended == 0:
                f.write(ckpt.header(self.instance, JournalMode.QUIESCENT.value))
                ckpt.write_state(self.instance, self._framework_state(), f)
            else:
                assert self._journal.snapshot is not None
                f.write(ckpt.header(self.instance, JournalMode.PENDING.value))
                f.write(self._journal.snapshot)
                f.write(msgpack.packb(self._journal.to_wire(), use_bin_type=True))
            size = f.tell()
            f.seek(0)
        except BaseException:
            f.close()
            raise
        self.checkpoints_taken += 1
        self.last_checkpoint_size = size
        self.checkpoint_write_seconds.observe(time.perf_counter() - began)
        self.checkpoint_write_bytes.observe(size)
        return f, size

    def _begin_load(self, size: int) -> None:
        self.log.info("recovering: loading a checkpoint of %d bytes", size)
        self._load_began = (time.perf_counter(), size)
        # Closed once the checkpoint is loaded.
        self._ckpt_in = tempfile.SpooledTemporaryFile(max_size=ckpt.SPOOL_MAX)  # noqa: SIM115

    def _finish_load(self) -> None:
        assert self._ckpt_in is not None
        f, self._ckpt_in = self._ckpt_in, None
        try:
            f.seek(0)
            self._load_checkpoint(f)
        finally:
            f.close()
        # From its first byte to its state loaded (the chunks' arrival included).
        began, size = self._load_began
        self.checkpoints_loaded += 1
        self.checkpoint_load_seconds.observe(time.perf_counter() - began)
        self.checkpoint_load_bytes.observe(size)

    def _load_checkpoint(self, f: IO[bytes]) -> None:
        objects = ckpt.read_objects(f)
        try:
            header = next(objects)
            mode = JournalMode(header["mode"])
            cls_name, version = header["class"], header["version"]
        except (StopIteration, KeyError, TypeError, ValueError) as e:
            raise SerializationError(f"the checkpoint has no valid header ({e})") from e
        except Exception as e:
            raise SerializationError(f"the checkpoint is not valid msgpack ({e})") from e
        target = self.upgrade_to
        if target is not None and (cls_name, version) == (target.__qualname__, target.version):
            self.log.info("the checkpoint is already %s version %d: running it", cls_name,
                          version)
            self.cls, self.upgrade_to = target, None
            self._loaded_upgraded = True
        elif (problem := ckpt.class_problem(cls_name, version, self.cls, target)) is not None:
            raise SerializationError(problem)
        self._read_state(objects)
        if mode is JournalMode.PENDING:
            inputs = [input_from_wire(r) for r in next(objects)]
            self._journal.begin(self._state_bytes())
            self.log.info("re-dispatching %d inputs to rebuild suspended calls", len(inputs))
            self._suppress = True
            try:
                for record in inputs:
                    self._journal.add(record)
                    self._apply(record)
            finally:
                self._suppress = False
            if self.handlers.suspended == 0:
                self._journal.clear()

    def _read_state(self, objects: Iterator[Any]) -> None:
        fw, self.instance = ckpt.read_state(self.cls, objects, self._attach)
        self._next_call_id = fw["next_call_id"]
        self._last_ts = fw["last_ts"]
        self._inputs_seen = fw["inputs_seen"]

    def _upgrade(self, live: bool) -> None:
        new_cls = self.upgrade_to
        if new_cls is None and self._loaded_upgraded and not live:
            raise AlreadyUpgradedError(
                f"the checkpoint already holds {self.cls.__qualname__} version "
                f"{self.cls.version} (the instance was upgraded live): an upgrade test "
                "replays a checkpoint of the version before the upgrade")
        if new_cls is None:
            raise LocalProtocolError(
                "the coordinator asked for an upgrade, but no VNext class was given "
                "(ambrosia run ... --upgrade-to MODULE:CLASS)"
            )
        old = self.instance
        assert old is not None
        convert = self.convert or new_cls.upgrade_from
        new = convert(old)
        if not isinstance(new, new_cls):
            raise TypeError(f"the state conversion returned {type(new).__qualname__}, "
                            f"not {new_cls.__qualname__}")
        if self._journal.snapshot is not None:
            # Handlers are suspended: a checkpoint carries the state from before the
            # first of them began and the inputs since, so that state is converted too
            # (else the new version's first checkpoint holds the old class's state, and
            # a recovery from it loses the conversion).
            fw, base = ckpt.read_state(self.cls, ckpt.read_objects(
                io.BytesIO(self._journal.snapshot)), self._attach)
            self._journal.snapshot = ckpt.state_bytes(convert(base), fw)
        self.instance = self._attach(new)
        self.cls, self.upgrade_to = new_cls, None
        self.log.info("upgraded to %s version %d (%s)", new_cls.__qualname__, new_cls.version,
                      "live" if live else "upgrade test")
        new.on_upgrade(live)
