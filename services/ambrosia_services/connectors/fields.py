"""The field codecs shared by the frames and the 2PC messages, sans-IO.

Every integer is big-endian; ``short_bytes`` is ``U16 length | bytes`` and text is UTF-8 in
one. Writing: the ``struct`` codecs and ``short_bytes`` / ``short_text``. Reading:
``FieldReader``, which raises ``FrameFormatError`` naming the field that is cut short or
bad. Checking: the attrs validators the frozen frame and message classes use, so that an
object that exists can always be encoded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, Final

import attrs

from .errors import FrameFormatError

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "U16",
    "U16_MAX",
    "U32",
    "U32_MAX",
    "U64",
    "U64_MAX",
    "FieldReader",
    "check_bool",
    "check_bytes",
    "check_i64",
    "check_short_bytes",
    "check_short_text",
    "check_tuple_of",
    "check_tuple_of_text",
    "check_u32",
    "check_u64",
    "int_range",
    "short_bytes",
    "short_text",
    "to_tuple",
]

U16_MAX: Final = (1 << 16) - 1
U32_MAX: Final = (1 << 32) - 1
U64_MAX: Final = (1 << 64) - 1
I64_MIN: Final = -(1 << 63)
I64_MAX: Final = (1 << 63) - 1

U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")
U64: Final = struct.Struct(">Q")


# ------------------------------------------------------------------ writing
def short_bytes(data: bytes) -> bytes:
    """``data`` as a ``short_bytes`` field: U16 length, then the bytes."""
    return U16.pack(len(data)) + data


def short_text(text: str) -> bytes:
    """``text`` in UTF-8 as a ``short_bytes`` field."""
    return short_bytes(text.encode("utf-8"))


# ------------------------------------------------------------------ reading
class FieldReader:
    """Reads fields from one frame or 2PC body; any shortfall is a ``FrameFormatError``."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def take(self, n: int, field: str) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise FrameFormatError(
                f"{self.what} is cut short: {field} needs {n} bytes, "
                f"{len(self.data) - self.pos} left"
            )
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def u8(self, field: str) -> int:
        return self.take(1, field)[0]

    def u16(self, field: str) -> int:
        value: int = U16.unpack(self.take(2, field))[0]
        return value

    def u32(self, field: str) -> int:
        value: int = U32.unpack(self.take(4, field))[0]
        return value

    def u64(self, field: str) -> int:
        value: int = U64.unpack(self.take(8, field))[0]
        return value

    def short_bytes(self, field: str) -> bytes:
        return self.take(self.u16(f"{field} length"), field)

    def short_text(self, field: str) -> str:
        return self.text(self.short_bytes(field), field)

    def text(self, raw: bytes, field: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FrameFormatError(f"{self.what}: {field} is not valid UTF-8") from None

    def rest(self) -> bytes:
        out = self.data[self.pos :]
        self.pos = len(self.data)
        return out

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def count(self, field: str, item_size: int) -> int:
        """A U32 item count, refused at once if the body cannot hold that many items."""
        n = self.u32(f"{field} count")
        if n * item_size > self.remaining:
            raise FrameFormatError(
                f"{self.what} is cut short: {n} {field} need at least {n * item_size} "
                f"bytes, {self.remaining} left"
            )
        return n

    def end(self) -> None:
        if self.pos != len(self.data):
            raise FrameFormatError(
                f"{self.what} has {len(self.data) - self.pos} unexpected bytes after its fields"
            )


# ------------------------------------------------------------------ validators
def int_range(lo: int, hi: int) -> Any:
    """An attrs validator: an int (not a bool) in ``[lo, hi]``."""

    def check(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not int or not lo <= value <= hi:
            raise ValueError(
                f"{type(inst).__name__}.{attr.name} must be an int in [{lo}, {hi}], got {value!r}"
            )

    return check


check_u32 = int_range(0, U32_MAX)
check_u64 = int_range(0, U64_MAX)
check_i64 = int_range(I64_MIN, I64_MAX)


def check_short_text(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """A str that fits a ``short_bytes`` field in UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise TypeError(f"{type(inst).__name__}.{attr.name} must be str, got {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > U16_MAX:
        raise ValueError(f"{type(inst).__name__}.{attr.name} is over {U16_MAX} bytes in UTF-8")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{type(inst).__name__}.{attr.name} holds a lone surrogate (not valid UTF-8)"
        ) from None


def check_short_bytes(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """Bytes that fit a ``short_bytes`` field."""
    if type(value) is not bytes:
        raise TypeError(f"{type(inst).__name__}.{attr.name} must be bytes, got {value!r}")
    if len(value) > U16_MAX:
        raise ValueError(f"{type(inst).__name__}.{attr.name} is over {U16_MAX} bytes")


def check_bytes(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not bytes:
        raise TypeError(f"{type(inst).__name__}.{attr.name} must be bytes, got {value!r}")


def check_bool(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not bool:
        raise TypeError(f"{type(inst).__name__}.{attr.name} must be bool, got {value!r}")


def check_tuple_of(kind: type, limit: int = U32_MAX) -> Any:
    """An attrs validator: a tuple of exactly ``kind``, at most ``limit`` items (a U32 count)."""

    def check(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not tuple or not all(type(v) is kind for v in value):
            raise TypeError(
                f"{type(inst).__name__}.{attr.name} must be a tuple of {kind.__name__}, "
                f"got {value!r}"
            )
        if len(value) > limit:
            raise ValueError(f"{type(inst).__name__}.{attr.name} has over {limit} items")

    return check


def check_tuple_of_text(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """A tuple of str, each fit for a ``short_bytes`` field."""
    if type(value) is not tuple:
        raise TypeError(f"{type(inst).__name__}.{attr.name} must be a tuple of str")
    for v in value:
        check_short_text(inst, attr, v)


def to_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    """An attrs converter: any iterable becomes a tuple."""
    return value if type(value) is tuple else tuple(value)
