"""The job protocol's byte layout: frames, and the body of each message.

A frame is ``U32 length | U8 type | body``; ``length`` counts the type byte and the body.
Every integer is big-endian. The README's "Byte layout" section is the reference; this
module and the golden tests follow it exactly.

``FrameDecoder`` is sans-IO: ``receive_data(bytes)`` buffers, ``next_message()`` returns a
message or ``NEED_DATA``. A frame whose length exceeds ``max_frame_size`` is refused as
soon as its four length bytes are in, before any of its body is buffered. After an error
the decoder is broken and raises the same error on every call.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Final, NoReturn

import msgpack

from ambrosia_core.wire import NEED_DATA, NeedData

from .errors import JobFrameTooLargeError, JobRemoteError, JobWireError, UnknownJobMessageTypeError
from .messages import (
    TYPE_OF,
    Batch,
    Cancel,
    Check,
    CheckResponse,
    FlowControl,
    JobId,
    JobMessage,
    MessageType,
    Start,
    check_params,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "MIN_MAX_FRAME_SIZE",
    "FrameDecoder",
    "decode_body",
    "encode",
]

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
# The longest fixed-size part of any message (a flow_control frame's 37 bytes) must fit.
MIN_MAX_FRAME_SIZE: Final = 64

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_JOB_ID = struct.Struct(">16sQ")
_BATCH_HEAD = struct.Struct(">16sQIQB")  # job id, edge, number, flags
_FLOW_CONTROL = struct.Struct(">16sQIQ")  # job id, edge, credits
_LAST: Final = 0x01


# ------------------------------------------------------------------ encoding


def _job_id(job: JobId) -> bytes:
    return _JOB_ID.pack(job.initiator.bytes, job.local_id)


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    return _U16.pack(len(data)) + data


def _job_ids(ids: tuple[JobId, ...]) -> bytes:
    return _U32.pack(len(ids)) + b"".join(_job_id(j) for j in ids)


def _body(msg: JobMessage) -> bytes:
    kind = type(msg)
    if kind is Batch:
        b: Batch = msg  # type: ignore[assignment]
        flags = _LAST if b.last else 0
        job = b.job_id
        return _BATCH_HEAD.pack(job.initiator.bytes, job.local_id, b.edge, b.number, flags) + b.rows
    if kind is FlowControl:
        f: FlowControl = msg  # type: ignore[assignment]
        return _FLOW_CONTROL.pack(f.job_id.initiator.bytes, f.job_id.local_id, f.edge, f.credits)
    if kind is Start:
        s: Start = msg  # type: ignore[assignment]
        members = b"".join(p.bytes for p in s.participants)
        params = msgpack.packb(s.params, use_bin_type=True)
        return (
            _job_id(s.job_id) + _U16.pack(len(s.participants)) + members + _text(s.name) + params
        )
    if kind is Cancel:
        c: Cancel = msg  # type: ignore[assignment]
        return _job_id(c.job_id) + c.cancelled_by.bytes + _I32.pack(c.error_code) + _text(c.message)
    if kind is Check:
        return _job_ids(msg.job_ids)  # type: ignore[union-attr]
    if kind is CheckResponse:
        r: CheckResponse = msg  # type: ignore[assignment]
        return _job_ids(r.active) + _job_ids(r.inactive)
    raise TypeError(f"not a job protocol message: {kind.__name__}")


def encode(msg: JobMessage) -> bytes:
    """One whole frame for ``msg``.

    Raises:
        TypeError: ``msg`` is not one of the six messages.
    """
    body = _body(msg)
    return _U32.pack(len(body) + 1) + _U8.pack(TYPE_OF[type(msg)]) + body


# ------------------------------------------------------------------ decoding


class _Reader:
    """Reads fields from one frame's body; running short is the peer's fault."""

    __slots__ = ("buf", "end", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)
        self.what = what

    def take(self, n: int, field: str) -> bytes:
        if self.end - self.pos < n:
            raise JobWireError(
                f"{self.what} is cut short: {field} needs {n} bytes, "
                f"{self.end - self.pos} remain"
            )
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    def unpack(self, fmt: struct.Struct, field: str) -> Any:
        return fmt.unpack(self.take(fmt.size, field))[0]

    def job_id(self, field: str = "job id") -> JobId:
        raw, local = _JOB_ID.unpack(self.take(_JOB_ID.size, field))
        return JobId(uuid.UUID(bytes=raw), local)

    def job_ids(self, field: str) -> list[JobId]:
        n = self.unpack(_U32, f"{field} count")
        if n * _JOB_ID.size > self.end - self.pos:
            raise JobWireError(
                f"{self.what} is cut short: {n} {field} need {n * _JOB_ID.size} bytes, "
                f"{self.end - self.pos} remain"
            )
        return [self.job_id(field) for _ in range(n)]

    def text(self, field: str) -> str:
        n = self.unpack(_U16, f"{field} length")
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise JobWireError(f"{self.what}: {field} is not valid UTF-8") from None

    def rest(self) -> bytes:
        data = self.buf[self.pos :]
        self.pos = self.end
        return data

    def done(self) -> None:
        if self.pos != self.end:
            raise JobWireError(f"{self.what} has {self.end - self.pos} bytes after its last field")


def _decode_params(raw: bytes) -> dict[str, Any]:
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=True)
    except msgpack.ExtraData as extra:
        raise JobWireError(
            f"start: {len(extra.extra)} bytes follow the params value"
        ) from None
    # msgpack reports bad input with several unrelated classes (ValueError, FormatError,
    # StackError, TypeError for an unhashable key) whose wording changes between versions:
    # all mean bad bytes here.
    except Exception:
        raise JobWireError("start: params are not valid msgpack (or have a non-str key)") from None
    try:
        return check_params(value)
    except (TypeError, ValueError) as err:
        raise JobWireError(f"start: params are not a plain map: {err}") from None


def _start(r: _Reader) -> Start:
    job = r.job_id()
    n = r.unpack(_U16, "participant count")
    members = [uuid.UUID(bytes=r.take(16, "participant id")) for _ in range(n)]
    name = r.text("job name")
    params = _decode_params(r.rest())
    return Start(job, name, params, members)


def _cancel(r: _Reader) -> Cancel:
    job = r.job_id()
    by = uuid.UUID(bytes=r.take(16, "cancelling member id"))
    code = r.unpack(_I32, "error code")
    message = r.text("error message")
    r.done()
    return Cancel(job, by, code, message)


def _batch(r: _Reader) -> Batch:
    raw, local, edge, number, flags = _BATCH_HEAD.unpack(r.take(_BATCH_HEAD.size, "batch header"))
    if flags & ~_LAST:
        raise JobWireError(f"batch: flags 0x{flags:02X} set bits other than last (0x01)")
    return Batch(JobId(uuid.UUID(bytes=raw), local), edge, number, r.rest(), bool(flags))


def _flow_control(r: _Reader) -> FlowControl:
    raw, local, edge, credits = _FLOW_CONTROL.unpack(r.take(_FLOW_CONTROL.size, "flow control"))
    r.done()
    return FlowControl(JobId(uuid.UUID(bytes=raw), local), edge, credits)


def _check(r: _Reader) -> Check:
    ids = r.job_ids("job ids")
    r.done()
    return Check(ids)


def _check_response(r: _Reader) -> CheckResponse:
    active = r.job_ids("active job ids")
    inactive = r.job_ids("inactive job ids")
    r.done()
    return CheckResponse(active, inactive)


_DECODERS: Final[dict[MessageType, Callable[[_Reader], JobMessage]]] = {
    MessageType.START: _start,
    MessageType.CANCEL: _cancel,
    MessageType.BATCH: _batch,
    MessageType.FLOW_CONTROL: _flow_control,
    MessageType.CHECK: _check,
    MessageType.CHECK_RESPONSE: _check_response,
}


def decode_body(type_byte: int, body: bytes) -> JobMessage:
    """The message in one frame's type byte and body.

    Raises:
        UnknownJobMessageTypeError: a type byte the protocol does not define.
        JobWireError: the body does not match the type's layout, or a field's value is
            out of range (a constructor refused it).
    """
    try:
        kind = MessageType(type_byte)
    except ValueError:
        raise UnknownJobMessageTypeError(
            f"unknown job message type {type_byte}", message_type=type_byte
        ) from None
    reader = _Reader(body, kind.name.lower())
    try:
        return _DECODERS[kind](reader)
    except JobRemoteError as err:
        raise type(err)(err.reason, message_type=type_byte) from None
    # A constructor refusing a decoded value (a zero credit grant, a name listed twice) means
    # the peer sent a value the protocol forbids.
    except (TypeError, ValueError) as err:
        raise JobWireError(f"{kind.name.lower()}: {err}", message_type=type_byte) from None


class FrameDecoder:
    """Frames in, messages out, for one direction of one connection.

    Args:
        max_frame_size: the largest ``length`` accepted (type byte + body), in bytes.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {MIN_MAX_FRAME_SIZE} bytes")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._offset = 0  # stream offset of self._buf[0]
        self._error: JobRemoteError | None = None
        self.frame_offset = 0  # stream offset of the last frame decoded

    @property
    def offset(self) -> int:
        """Stream offset of the next byte to parse."""
        return self._offset + self._pos

    @property
    def buffered(self) -> int:
        """Bytes received and not yet turned into messages."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes from the peer.

        Raises:
            JobFrameTooLargeError: unparsed input exceeds a frame's bound plus this chunk
                (the caller is not draining messages between feeds).
        """
        if self._error is not None:
            raise self._error
        self._buf += data
        if self.buffered > self.max_frame_size + 4 + max(len(data), 1 << 20):
            self._fail(JobFrameTooLargeError(
                "unparsed input exceeds the frame bound; drain messages between feeds",
                offset=self.offset,
            ))

    def _fail(self, err: JobRemoteError) -> NoReturn:
        self._error = err
        raise err

    def next_message(self) -> JobMessage | NeedData:
        """The next whole message, or ``NEED_DATA``.

        Raises:
            JobRemoteError: bad bytes (the decoder is broken from then on).
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 4:
            return NEED_DATA
        (length,) = _U32.unpack_from(buf, pos)
        if length < 1:
            self._fail(JobWireError("frame length 0 has no room for the type byte",
                                    offset=self.offset))
        if length > self.max_frame_size:
            self._fail(JobFrameTooLargeError(
                f"frame length {length} exceeds the limit of {self.max_frame_size} bytes",
                offset=self.offset,
            ))
        end = pos + 4 + length
        if len(buf) < end:
            return NEED_DATA
        self.frame_offset = self.offset
        type_byte = buf[pos + 4]
        body = bytes(buf[pos + 5 : end])
        try:
            msg = decode_body(type_byte, body)
        except JobRemoteError as err:
            self._fail(type(err)(err.reason, offset=self.offset, message_type=err.message_type))
        self._pos = end
        if end == len(buf):
            buf.clear()
            self._offset += end
            self._pos = 0
        elif end > 65536 and end * 2 > len(buf):
            # Drop consumed bytes now and then, not per frame: each drop copies the rest.
            del buf[:end]
            self._offset += end
            self._pos = 0
        return msg
