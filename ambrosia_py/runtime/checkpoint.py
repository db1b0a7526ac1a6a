"""The framework's checkpoint stream: how an immortal's state becomes msgpack objects in a
file and back. ``Engine`` decides when; this module knows the layout. It reads how the
class checkpoints from ``methods.Hosted.__ambrosia_state_form__`` (recorded when the
class was defined), not by importing ``Immortal`` to compare methods.

Layout: a header map (format, class, version, mode), the framework's counters, then the
state as ``serialization.write_state`` writes it, or a chunk mark followed by the user's
producer stream (bin objects of at most 1 MiB, then an empty one). A checkpoint taken
while handlers were suspended ("p" mode) ends with the inputs dispatched since the
snapshot.

Large ``bytes`` fields are the common case for big states, so both directions avoid
copying them more than once: the writer emits a bin header and then the value itself,
and the reader reads a large bin object from the file in one call into its final
``bytes`` (msgpack's unpacker would grow a buffer by doubling and copy out of it). Other
objects go through the unpacker, whose buffer may grow to the whole checkpoint (its
default 100 MiB limit would refuse an object that was written fine).
"""

from __future__ import annotations

import io
import itertools
import struct
import typing
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs
import msgpack

from ambrosia_py.errors import SerializationError

from .. import serialization as ser
from ..methods import Hosted, StateForm

__all__ = ["CHECKPOINT_FORMAT", "class_problem", "header", "read_header", "read_objects",
           "read_state", "state_bytes", "write_state"]

CHECKPOINT_FORMAT = 1
SPOOL_MAX = 8 << 20  # checkpoints bigger than this go through a temporary file
_CHUNKS_MARK = "__ambrosia_chunks__"  # the state that follows is the user's chunk stream
_CHUNK_MAX = 1 << 20  # the largest chunk of a producer's stream stored as one object
_READ_SIZE = 1 << 20  # fewer, larger reads: the unpacker copies each into its buffer
_MIN_BUFFER = 1 << 20
_PLAIN = (int, float, str, bytes, bool)
_BIN8, _BIN16, _BIN32 = struct.Struct(">BB"), struct.Struct(">BH"), struct.Struct(">BI")


def header(inst: Hosted, mode: str) -> bytes:
    cls = type(inst)
    return msgpack.packb({"format": CHECKPOINT_FORMAT, "class": cls.__qualname__,
                          "version": cls.version, "mode": mode})


def read_header(data: bytes) -> tuple[str, int] | None:
    """The class name and version named by a checkpoint whose first bytes are ``data``
    (the header is its first object, a few dozen bytes); None if they hold no header."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    try:
        head = next(unpacker)
    except Exception:  # msgpack raises several unrelated types; StopIteration: too short
        return None
    if not isinstance(head, dict):
        return None
    name, version = head.get("class"), head.get("version")
    if not isinstance(name, str) or not isinstance(version, int):
        return None
    return name, version


def class_problem(held: str, held_version: int, cls: type[Hosted],
                  upgrade_to: type[Hosted] | None = None) -> str | None:
    """Why the code ``cls`` (upgrading to ``upgrade_to``, if given) cannot run from a
    checkpoint of class ``held`` at ``held_version``, in one line saying what to run
    instead; None when it can: the checkpoint holds ``cls``, or ``upgrade_to`` (the
    instance was upgraded already, and that class runs)."""
    if (held, held_version) == (cls.__qualname__, cls.version):
        return None
    if upgrade_to is not None and (held, held_version) == (upgrade_to.__qualname__,
                                                           upgrade_to.version):
        return None
    code = cls.__qualname__
    said = (f"the checkpoint holds {held} version {held_version}, but the code is {code} "
            f"version {cls.version}")
    if held_version > cls.version:
        return f"{said}: the instance was upgraded to {held} already; run it with that class"
    if held_version < cls.version:
        return (f"{said}: to upgrade it, run the class it holds, {held}, with {code} as "
                "the upgrade target (--upgrade-to)")
    return (f"{said}: run it with the class it holds, {held} (to change classes, give the "
            "new one a later version and make it the upgrade target)")


def read_objects(f: IO[bytes], size: int | None = None) -> Iterator[Any]:
    """The msgpack objects of a checkpoint file.

    Args:
        size: the checkpoint's size in bytes (default: from the file). No object in it
            can be larger, so it bounds the unpacker's buffer instead of msgpack's
            default, which is smaller than the states a checkpoint may hold.
    """
    if size is None:
        pos = f.tell()
        size = f.seek(0, 2) - pos
        f.seek(pos)
    if f.seekable():
        return _objects(f, max(size, _MIN_BUFFER))
    return iter(msgpack.Unpacker(f, raw=False, strict_map_key=False, read_size=_READ_SIZE,
                                 max_buffer_size=max(size, _MIN_BUFFER)))


def _objects(f: IO[bytes], limit: int) -> Iterator[Any]:
    """``read_objects`` for a seekable file: a bin32 object that did not fit the data
    read so far is read from the file in one call, straight into its final ``bytes``.

    msgpack's unpacker would instead grow its buffer by doubling and copy the object
    out of it, which loads a large state at a few percent of the speed of reading the
    file. Everything else (and a bin32 object already within the last read) goes
    through the unpacker as before, so the format is plain msgpack either way.
    """
    base = f.tell()  # the file offset of the current unpacker's first byte
    fed = base  # the file offset up to which the unpacker has been fed
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=limit)
    start = base  # where the next object begins
    while True:
        try:
            obj = unpacker.unpack()
        except msgpack.OutOfData:
            f.seek(start)
            head = f.read(5)
            if len(head) == 5 and head[0] == 0xC6:
                n = int.from_bytes(head[1:], "big")
                data = f.read(n)
                if len(data) < n:
                    return  # cut short: the reader of the objects says so
                yield data
                base = fed = start = f.tell()
                unpacker = msgpack.Unpacker(raw=False, strict_map_key=False,
                                            max_buffer_size=limit)
                continue
            f.seek(fed)
            chunk = f.read(_READ_SIZE)
            if not chunk:
                return  # as msgpack's own iterator: an incomplete tail just ends it
            unpacker.feed(chunk)
            fed += len(chunk)
            continue
        start = base + unpacker.tell()
        yield obj


# ------------------------------------------------------------------ writing
def _write_bin(out: IO[bytes], data: bytes | bytearray) -> None:
    """msgpack's bin form of ``data``, written without first packing a copy of it."""
    n = len(data)
    if n < 1 << 8:
        out.write(_BIN8.pack(0xC4, n))
    elif n < 1 << 16:
        out.write(_BIN16.pack(0xC5, n))
    else:
        out.write(_BIN32.pack(0xC6, n))
    out.write(data)


def _writer(out: IO[bytes]) -> Callable[[Any], None]:
    """A ``write`` for ``serialization.write_state`` that passes large bytes through."""
    packer = msgpack.Packer(use_bin_type=True)

    def write(value: Any) -> None:
        if type(value) in (bytes, bytearray) and len(value) >= _CHUNK_MAX:
            _write_bin(out, value)
        else:
            out.write(packer.pack(value))

    return write


def write_state(inst: Hosted, framework: dict[str, Any], out: IO[bytes]) -> None:
    """The framework's counters and the instance's state, as the reader expects them."""
    out.write(msgpack.packb(framework))
    cls = type(inst)
    s = cls.__ambrosia_serializer__
    form = cls.__ambrosia_state_form__
    if form is StateForm.STREAM:
        _write_chunks(inst, out)
        return
    if form is StateForm.OBJECT:
        ser.write_state({"__custom__": inst.checkpoint_state()}, out, s.dump, _writer(out))
        return
    if attrs.has(cls):
        names = [f.name for f in attrs.fields(cls)]
    else:
        names = [k for k in vars(inst) if not k.startswith("_")]
    ser.write_state({n: getattr(inst, n) for n in names}, out, s.dump, _writer(out))


def _write_chunks(inst: Hosted, out: IO[bytes]) -> None:
    """The user's producer: a mark, then msgpack bin objects of at most 1 MiB, then an
    empty one."""
    out.write(msgpack.packb(_CHUNKS_MARK))
    for chunk in inst.checkpoint_producer():
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise SerializationError(
                f"{type(inst).__qualname__}.checkpoint_producer yielded "
                f"{type(chunk).__name__}, not bytes")
        view = memoryview(chunk).cast("B")
        for i in range(0, len(view), _CHUNK_MAX):
            out.write(msgpack.packb(view[i:i + _CHUNK_MAX], use_bin_type=True))
    out.write(msgpack.packb(b"", use_bin_type=True))


def state_bytes(inst: Hosted, framework: dict[str, Any]) -> bytes:
    """The state as ``write_state`` writes it, in memory: the journal's snapshot, taken
    as each input that may suspend begins. The bytes are wanted whole, so a temporary
    file would not spare memory, and its wrapper cost more than a small state's writing;
    ``getvalue`` hands over the buffer without copying it."""
    f = io.BytesIO()
    write_state(inst, framework, f)
    return f.getvalue()


# ------------------------------------------------------------------ reading
def _is_plain_container(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, dict) and args:
        return all(a in _PLAIN for a in args)
    return False


def read_state(cls: type[Hosted], objects: Iterator[Any],
               attach: Callable[[Hosted], Hosted]) -> tuple[dict[str, Any], Hosted]:
    """(the framework's counters, a new instance of ``cls`` holding the state)."""
    fw = next(objects)
    first = next(objects)
    if first == _CHUNKS_MARK:
        return fw, _read_chunks(cls, objects, attach)
    fields = ser.read_state(itertools.chain([first], objects))
    inst = attach(cls())
    s = cls.__ambrosia_serializer__
    if cls.__ambrosia_state_form__ is StateForm.OBJECT:
        inst.load_state(fields["__custom__"])
    else:
        types = cls.__ambrosia_state_types__
        for name, value in fields.items():
            tp = types.get(name, Any)
            if not _is_plain_container(tp):
                value = s.load(value, tp)
            object.__setattr__(inst, name, value)
    return fw, inst


def _read_chunks(cls: type[Hosted], objects: Iterator[Any],
                 attach: Callable[[Hosted], Hosted]) -> Hosted:
    if cls.__ambrosia_state_form__ is not StateForm.STREAM:
        raise SerializationError(
            f"the checkpoint was written by a checkpoint_producer, but "
            f"{cls.__qualname__} defines no checkpoint_consumer")
    ended = False

    def chunks() -> Iterator[bytes]:
        nonlocal ended
        while not ended:
            chunk = next(objects, None)
            if not isinstance(chunk, bytes):
                raise SerializationError("the checkpoint's chunks are cut short")
            if not chunk:
                ended = True
                return
            yield chunk

    inst = attach(cls())
    rest = chunks()
    inst.checkpoint_consumer(rest)
    for _ in rest:  # a consumer that stopped early leaves the stream aligned
        pass
    return inst
