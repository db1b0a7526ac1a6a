"""Argument, result and state codecs.

Three argument forms share an RPC's argument bytes; the first byte tells them apart:

- ``0x90..0x9F`` (a msgpack array): the fast Python-to-Python form, an ``Envelope``;
- ``{``: a UTF-8 JSON object (AmbrosiaJS's form, also its "post" calls);
- ``0xFF`` then raw bytes (AmbrosiaJS's binary form).

Values go through a cattrs converter, so attrs classes, dataclasses, enums and the usual
containers travel as msgpack and come back as the annotated types.

Checkpoints are a stream of msgpack objects rather than one object, so that neither the
writer nor the reader ever holds the serialized state and the live state whole at once:
each attribute is its own object, and a large list/dict attribute is written item by item
behind a small marker (see ``write_state``).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, NamedTuple

import attrs
import cattrs
import msgpack

from ambrosia_py.errors import SerializationError

__all__ = [
    "RAW_BYTES_MARKER",
    "Envelope",
    "encode_envelope",
    "envelope_encoder",
    "Serializer",
    "check_serializable",
    "decode_json_args",
    "decode_raw_args",
    "encode_json_args",
    "encode_raw_args",
    "read_state",
    "write_state",
]

RAW_BYTES_MARKER = 0xFF
_unpackb = msgpack.unpackb
_packb = msgpack.packb
_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__
_STREAM_MARK = "__ambrosia_stream__"
_STREAM_MIN_ITEMS = 1024  # containers at least this long are written item by item

_PRIMITIVES = (int, float, str, bytes, bool, type(None), bytearray)
_AS_IS = frozenset((int, float, str, bytes, bool))  # immutable: loading one returns it


def loads_as_is(tp: Any) -> bool:
    """Whether ``Serializer.load(value, tp)`` returns a value whose type is exactly ``tp``
    unchanged (so a caller that checked the type may skip the call)."""
    return tp in _AS_IS


class Envelope(NamedTuple):
    """The Python-to-Python argument form of an RPC.

    Attributes:
        timestamp_ns: the logged wall-clock time the callee's ``ctx.now()`` returns.
        entropy: the logged 64-bit seed of the callee's ``ctx.random()``.
        call_id: the caller's id for an awaited call, or -1 for fire-and-forget.
        caller: the caller's instance name (where a result goes).
        payload: the arguments (``[args, kwargs]``) or, for a result, ``[ok, value]``.
    """

    timestamp_ns: int
    entropy: int
    call_id: int
    caller: str
    payload: Any

    def encode(self) -> bytes:
        try:
            return msgpack.packb(tuple(self), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:
            raise SerializationError(f"cannot serialize RPC arguments: {e}") from e

    @classmethod
    def decode(cls, data: bytes) -> Envelope:
        try:
            items = _unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several unrelated types
            raise SerializationError(f"RPC arguments are not valid msgpack: {e}") from e
        if type(items) is list and len(items) == 5:
            # The usual case (what this binding writes), checked by exact types; the
            # general checks below give the same answer for everything else.
            ts, entropy, call_id, caller, _ = items
            if type(ts) is int and type(entropy) is int and type(call_id) is int and (
                    type(caller) is str):
                return _new(cls, items)
        if not isinstance(items, list) or len(items) != 5:
            raise SerializationError("RPC arguments are not an ambrosia-py envelope")
        ts, entropy, call_id, caller, payload = items
        if not (isinstance(ts, int) and isinstance(entropy, int) and isinstance(call_id, int)
                and isinstance(caller, str)):
            raise SerializationError("RPC envelope fields have the wrong types")
        return cls(ts, entropy, call_id, caller, payload)


def encode_envelope(timestamp_ns: int, entropy: int, call_id: int, caller: str,
                    payload: Any) -> bytes:
    """``Envelope(...).encode()``, packed directly (no tuple built in between)."""
    try:
        return _packb((timestamp_ns, entropy, call_id, caller, payload),
                      use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise SerializationError(f"cannot serialize RPC arguments: {e}") from e


_PACKER_KEEP = 1 << 20  # a packer whose buffer grew past this is replaced after use


def envelope_encoder() -> Callable[[int, int, int, str, Any], bytes]:
    """``encode_envelope`` with a packer of its own, kept between calls: ``packb``
    makes a ``Packer`` (and its 256 KiB buffer) per call, half of a small envelope's
    time. One thread only (an engine's handlers); the same bytes and errors. A packer
    that held a large envelope is dropped, so its buffer is not kept."""
    packer = msgpack.Packer(use_bin_type=True)

    def encode(timestamp_ns: int, entropy: int, call_id: int, caller: str,
               payload: Any) -> bytes:
        nonlocal packer
        try:
            out: bytes = packer.pack((timestamp_ns, entropy, call_id, caller, payload))
        except (TypeError, ValueError, OverflowError) as e:
            packer = msgpack.Packer(use_bin_type=True)  # nothing half-packed is kept
            raise SerializationError(f"cannot serialize RPC arguments: {e}") from e
        if len(out) > _PACKER_KEEP:
            packer = msgpack.Packer(use_bin_type=True)
        return out

    return encode


def is_envelope(args: bytes) -> bool:
    return bool(args) and 0x90 <= args[0] <= 0x9F


def encode_json_args(obj: Mapping[str, Any]) -> bytes:
    """AmbrosiaJS's JSON argument form: a UTF-8 JSON object."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise SerializationError(f"cannot encode JSON arguments: {e}") from e


def decode_json_args(args: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(args.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SerializationError(f"RPC arguments are not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise SerializationError("JSON RPC arguments must be an object")
    return obj


def encode_raw_args(data: bytes) -> bytes:
    """AmbrosiaJS's binary argument form: 0xFF then the raw bytes."""
    return bytes([RAW_BYTES_MARKER]) + bytes(data)


def decode_raw_args(args: bytes) -> bytes:
    return bytes(args[1:])


# ---------------------------------------------------------------- values
def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(datetime.datetime, lambda d: d.isoformat())
    conv.register_structure_hook(
        datetime.datetime, lambda v, _: datetime.datetime.fromisoformat(v)
    )
    conv.register_unstructure_hook(bytearray, bytes)
    conv.register_structure_hook_func(lambda t: t is object, lambda v, _: v)  # as it came
    conv.register_unstructure_hook_factory(
        _is_named_tuple, lambda _tp: lambda v: [conv.unstructure(x) for x in v])
    conv.register_structure_hook_factory(
        _is_named_tuple, lambda tp: _named_tuple_structure(conv, tp))
    return conv


def _is_named_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _named_tuple_structure(conv: cattrs.Converter, tp: type) -> Callable[[Any, Any], Any]:
    """A NamedTuple from the array of its fields, each by its annotation (resolved, so
    that a module with ``from __future__ import annotations`` works too)."""
    hints = typing.get_type_hints(tp)
    fields: tuple[str, ...] = tp._fields  # type: ignore[attr-defined]
    types = [hints.get(name, Any) for name in fields]

    def structure(value: Any, _tp: Any) -> Any:
        if len(value) != len(types):
            raise ValueError(f"{tp.__qualname__} has {len(types)} fields, not {len(value)}")
        return tp(*(conv.structure(v, t) for v, t in zip(value, types, strict=True)))

    return structure


class Serializer:
    """Unstructures Python values to msgpack-able ones and back, by type annotation.

    One per immortal class (built when the class is defined), never shared mutable state.
    """

    def __init__(self) -> None:
        self._conv = _make_converter()

    def dump(self, value: Any) -> Any:
        if type(value) in _AS_IS:
            return value  # what the converter makes of it, without its dispatch
        try:
            return self._conv.unstructure(value)
        except Exception as e:
            raise SerializationError(f"cannot serialize {type(value).__name__}: {e}") from e

    def dump_all(self, values: tuple[Any, ...]) -> list[Any]:
        """``[self.dump(v) for v in values]``, the immutable primitives without a call."""
        dump = self.dump
        return [v if type(v) in _AS_IS else dump(v) for v in values]

    def load(self, value: Any, tp: Any) -> Any:
        if tp is Any or tp is None or tp is inspect_empty:
            return value
        if type(value) is tp and tp in _AS_IS:
            return value  # what the converter would make of it, without its dispatch
        try:
            return self._conv.structure(value, tp)
        except Exception as e:
            raise SerializationError(
                f"cannot deserialize a value as {_type_name(tp)}: {_cattrs_reason(e)}"
            ) from e


inspect_empty: Any = object()  # stands for "no annotation" (inspect.Parameter.empty)


def _cattrs_reason(e: BaseException) -> str:
    if isinstance(e, cattrs.BaseValidationError):
        subs = getattr(e, "exceptions", [])
        if subs:
            return "; ".join(_cattrs_reason(s) for s in subs)
    return str(e) or type(e).__name__


def _type_name(tp: Any) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def check_serializable(tp: Any, _seen: frozenset[Any] = frozenset()) -> str | None:
    """None if values of ``tp`` can travel as arguments or state, else why not."""
    if tp is Any or tp is object or tp is inspect_empty or tp is None or tp is type(None):
        return None
    if isinstance(tp, str):
        return f"the annotation {tp!r} could not be resolved"
    if tp in _seen:
        return None
    seen = _seen | {tp}
    if isinstance(tp, typing.TypeVar):
        return None
    origin = typing.get_origin(tp)
    if origin is not None:
        if origin is typing.Literal:
            return None
        if origin is typing.Annotated:
            return check_serializable(typing.get_args(tp)[0], seen)
        if origin in (list, tuple, set, frozenset, dict, typing.Union, types.UnionType) or (
            isinstance(origin, type) and issubclass(origin, (Mapping, typing.Sequence,
                                                             typing.AbstractSet))
        ):
            for a in typing.get_args(tp):
                if a is Ellipsis:
                    continue
                why = check_serializable(a, seen)
                if why:
                    return why
            return None
        return f"{tp!r} is not a type that can be serialized"
    if not isinstance(tp, type):
        return f"{tp!r} is not a type"
    if issubclass(tp, _PRIMITIVES) or tp in (list, dict, tuple, set, frozenset):
        return None
    if issubclass(tp, (enum.Enum, datetime.datetime)):
        return None
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):  # a NamedTuple: an array
        try:
            hints = typing.get_type_hints(tp)
        except Exception as e:
            return f"the annotations of {tp.__qualname__} cannot be resolved ({e})"
        for name in tp._fields:
            why = check_serializable(hints.get(name, Any), seen)
            if why:
                return f"{tp.__qualname__}.{name}: {why}"
        return None
    if attrs.has(tp):
        try:
            hints = typing.get_type_hints(tp)
        except Exception as e:
            return f"the annotations of {tp.__qualname__} cannot be resolved ({e})"
        for f in attrs.fields(tp):
            why = check_serializable(hints.get(f.name, Any), seen)
            if why:
                return f"{tp.__qualname__}.{f.name}: {why}"
        return None
    if dataclasses.is_dataclass(tp):
        try:
            hints = typing.get_type_hints(tp)
        except Exception as e:
            return f"the annotations of {tp.__qualname__} cannot be resolved ({e})"
        for f in dataclasses.fields(tp):
            why = check_serializable(hints.get(f.name, Any), seen)
            if why:
                return f"{tp.__qualname__}.{f.name}: {why}"
        return None
    return (
        f"{tp.__qualname__} cannot be serialized (use a primitive, a container, an enum, "
        "a NamedTuple, an attrs class or a dataclass)"
    )


# ---------------------------------------------------------------- state streams
def write_state(fields: Mapping[str, Any], out: IO[bytes],
                dump: Callable[[Any], Any] = lambda v: v,
                write: Callable[[Any], None] | None = None) -> None:
    """Write ``fields`` (name -> value, unstructured with ``dump``) as msgpack objects.

    Layout: ``n``, then ``name, value`` ``n`` times; a list or dict value of at least
    1024 items is written as ``[marker, "l"|"d", count]`` followed by its items (a dict's
    as key, value, key, value ...), each unstructured on its own, so neither the state nor
    its serialized form is ever copied whole. ``write`` (default: pack, then write to
    ``out``) emits one unstructured value; the checkpoint writer passes one that writes
    large bytes without packing a copy first.
    """
    packer = msgpack.Packer(use_bin_type=True)
    if write is None:
        def write(value: Any) -> None:
            out.write(packer.pack(value))
    try:
        write(len(fields))
        for name, value in fields.items():
            write(name)
            if isinstance(value, list) and len(value) >= _STREAM_MIN_ITEMS:
                write([_STREAM_MARK, "l", len(value)])
                for item in value:
                    write(dump(item))
            elif isinstance(value, dict) and len(value) >= _STREAM_MIN_ITEMS:
                write([_STREAM_MARK, "d", len(value)])
                for k, v in value.items():
                    write(dump(k))
                    write(dump(v))
            else:
                write(dump(value))
    except (TypeError, ValueError, OverflowError) as e:
        raise SerializationError(f"cannot serialize the state field {name!r}: {e}") from e


def read_state(objects: Iterator[Any]) -> dict[str, Any]:
    """Read what ``write_state`` wrote from an iterator of msgpack objects."""
    try:
        n = next(objects)
        if not isinstance(n, int) or n < 0:
            raise SerializationError("checkpoint state does not start with a field count")
        fields: dict[str, Any] = {}
        for _ in range(n):
            name = next(objects)
            value = next(objects)
            if isinstance(value, list) and len(value) == 3 and value[0] == _STREAM_MARK:
                kind, count = value[1], value[2]
                if kind == "l":
                    value = [next(objects) for _ in range(count)]
                else:
                    d = {}
                    for _ in range(count):
                        k = next(objects)
                        d[k] = next(objects)
                    value = d
            fields[name] = value
        return fields
    except StopIteration:
        raise SerializationError("checkpoint state is cut short") from None
    except SerializationError:
        raise
    except Exception as e:
        raise SerializationError(f"checkpoint state is not valid msgpack: {e}") from e
