"""The job protocol's six messages and the job id, as small frozen classes.

Each is an attrs frozen, slotted class whose constructor validates every field against
what the wire can carry, so a message that exists can always be encoded, and a decoder can
only hand out messages that would encode back to the same bytes. Equality sees the class:
a ``Check`` never equals a ``CheckResponse`` with the same ids (plain tuples would).

Values out of range raise ``ValueError`` (``TypeError`` for a wrong type): building a
message is the caller's act, so it is the caller's fault, raised before any byte exists.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import msgpack

__all__ = [
    "MAX_EDGE",
    "MAX_U64",
    "Batch",
    "Cancel",
    "Check",
    "CheckResponse",
    "FlowControl",
    "JobId",
    "JobMessage",
    "MessageType",
    "Start",
    "check_params",
]

MAX_U16: Final = 2**16 - 1
MAX_U32: Final = 2**32 - 1
MAX_EDGE: Final = MAX_U32
MAX_U64: Final = 2**64 - 1
MIN_I32: Final = -(2**31)
MAX_I32: Final = 2**31 - 1


class MessageType(enum.IntEnum):
    """The type byte after a frame's length. Direction: I = initiator, P = participant."""

    START = 1  # I -> P
    CANCEL = 2  # P -> I (request), I -> P (broadcast)
    BATCH = 3  # any -> any: a stream's rows, sender to receiver
    FLOW_CONTROL = 4  # any -> any: a stream's receiver grants byte credits to its sender
    CHECK = 5  # P -> I
    CHECK_RESPONSE = 6  # I -> P


def _range(low: int, high: int, what: str) -> Any:
    """An attrs validator: an int (not a bool) within [low, high]."""

    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not int:
            raise TypeError(f"{attr.name} must be an int {what}, got {type(value).__name__}")
        if not low <= value <= high:
            raise ValueError(f"{attr.name} {value} is out of range for {what} ({low}..{high})")

    return check


def _is_uuid(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"{attr.name} must be a uuid.UUID, got {type(value).__name__}")


def _short_text(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """A string whose UTF-8 form fits a U16 length."""
    if not isinstance(value, str):
        raise TypeError(f"{attr.name} must be a str, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as err:  # lone surrogates have no UTF-8 form
        raise ValueError(f"{attr.name} is not encodable as UTF-8: {err.reason}") from None
    if size > MAX_U16:
        raise ValueError(f"{attr.name} is {size} bytes in UTF-8; at most {MAX_U16} fit")


@attrs.frozen(order=True)
class JobId:
    """A job's cluster-wide id: the initiator's member id and a local id it derives itself.

    The coordinator immortal derives ``local_id`` from its own logged state (a counter), so
    a replay derives the same id. ``uuid`` is the same pair as one UUID, for names that
    need a single string (a Spark job tag, a staging directory).
    """

    initiator: uuid.UUID = attrs.field(validator=_is_uuid)
    local_id: int = attrs.field(validator=_range(0, MAX_U64, "a U64"))

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.uuid5(self.initiator, f"job/{self.local_id}")

    def __str__(self) -> str:
        return f"{self.initiator}/{self.local_id}"


def _is_job_id(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not JobId:
        raise TypeError(f"{attr.name} must be a JobId, got {type(value).__name__}")


def _job_ids(values: Iterable[JobId]) -> tuple[JobId, ...]:
    return tuple(values)


def _distinct_job_ids(_inst: object, attr: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for item in value:
        if type(item) is not JobId:
            raise TypeError(f"{attr.name} must hold JobIds, got {type(item).__name__}")
    if len(set(value)) != len(value):
        raise ValueError(f"{attr.name} names a job twice")
    if len(value) > MAX_U32:
        raise ValueError(f"{attr.name} holds {len(value)} ids; at most {MAX_U32} fit")


def _as_bytes(value: object) -> bytes:
    """Bytes-like only: ``bytes(5)`` would silently make five zero bytes of an int."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"rows must be bytes, got {type(value).__name__}")
    return bytes(value)


_SCALARS = (type(None), bool, int, float, str, bytes)


def check_params(params: object) -> dict[str, Any]:
    """The job parameters as the wire will carry them, or an error naming the problem.

    Parameters are a map with string keys whose values are msgpack's plain types: None,
    bool, int (-2**63 .. 2**64-1), float, str, bytes, lists and maps of them. Tuples come
    back as lists, so the result (not the argument) is what a decoder would produce.

    Raises:
        TypeError: not a map, a non-string key, or a value of another type.
        ValueError: an integer msgpack cannot carry, or a string with no UTF-8 form.
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a map, got {type(params).__name__}")
    _check_plain(params)
    try:
        packed = msgpack.packb(params, use_bin_type=True)
    except OverflowError:
        raise ValueError("params hold an integer msgpack cannot carry") from None
    except UnicodeEncodeError as err:
        raise ValueError(f"params hold a string with no UTF-8 form: {err.reason}") from None
    result = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    assert isinstance(result, dict)
    return result


def _check_plain(root: object) -> None:
    """Walk (without recursion, so depth cannot overflow the stack) and refuse other types."""
    todo = [root]
    while todo:
        value = todo.pop()
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"params keys must be str, got {type(key).__name__}")
                todo.append(item)
        elif isinstance(value, (list, tuple)):
            todo.extend(value)
        elif type(value) not in _SCALARS:
            raise TypeError(f"params cannot carry a {type(value).__name__}")


def _participants(values: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
    return tuple(values)


def _check_participants(
    _inst: object, attr: attrs.Attribute[Any], value: tuple[Any, ...]
) -> None:
    if not value:
        raise ValueError("a job needs at least one participant")
    for item in value:
        if not isinstance(item, uuid.UUID):
            raise TypeError(f"participants must be uuid.UUIDs, got {type(item).__name__}")
    if len(set(value)) != len(value):
        raise ValueError("participants name a member twice")
    if len(value) > MAX_U16:
        raise ValueError(f"{len(value)} participants; at most {MAX_U16} fit")


@attrs.frozen
class Start:
    """Initiator -> each participant: run this job now (section 3.2).

    ``name`` and ``params`` are the plan (the job function's registered name and its
    arguments); ``participants`` is the fixed list of members that take part.
    Not hashable (``params`` is a dict).
    """

    job_id: JobId = attrs.field(validator=_is_job_id)
    name: str = attrs.field(validator=_short_text)
    params: dict[str, Any] = attrs.field(converter=check_params)
    participants: tuple[uuid.UUID, ...] = attrs.field(
        converter=_participants, validator=_check_participants
    )

    @name.validator
    def _name_not_empty(self, _attr: attrs.Attribute[str], value: str) -> None:
        if not value:
            raise ValueError("a job name must not be empty")


@attrs.frozen
class Cancel:
    """Cancel a job: participant -> initiator (a request), initiator -> every participant.

    ``cancelled_by`` is the member that decided to cancel (section 3.3's cancel initiator);
    ``error_code`` and ``message`` say why.
    """

    job_id: JobId = attrs.field(validator=_is_job_id)
    cancelled_by: uuid.UUID = attrs.field(validator=_is_uuid)
    error_code: int = attrs.field(validator=_range(MIN_I32, MAX_I32, "an I32"))
    message: str = attrs.field(validator=_short_text)


@attrs.frozen
class Batch:
    """Some rows of one stream, sender -> receiver (section 3.4.1).

    A stream is ``(job_id, edge)`` in one direction of one connection. ``number`` counts
    the stream's batches from 0; ``rows`` is opaque to the protocol and costs ``len(rows)``
    credits; ``last`` ends the stream.
    """

    job_id: JobId = attrs.field(validator=_is_job_id)
    edge: int = attrs.field(validator=_range(0, MAX_EDGE, "a U32 edge id"))
    number: int = attrs.field(validator=_range(0, MAX_U64, "a U64 batch number"))
    rows: bytes = attrs.field(converter=_as_bytes)
    last: bool = attrs.field(default=False)

    @last.validator
    def _last_is_bool(self, _attr: attrs.Attribute[bool], value: object) -> None:
        if type(value) is not bool:
            raise TypeError(f"last must be a bool, got {type(value).__name__}")


@attrs.frozen
class FlowControl:
    """A stream's receiver grants its sender ``credits`` more bytes (section 3.4.2)."""

    job_id: JobId = attrs.field(validator=_is_job_id)
    edge: int = attrs.field(validator=_range(0, MAX_EDGE, "a U32 edge id"))
    credits: int = attrs.field(validator=_range(1, MAX_U64, "a U64 credit grant"))


@attrs.frozen
class Check:
    """Participant -> initiator: are these jobs, which I still hold, active with you?"""

    job_ids: tuple[JobId, ...] = attrs.field(converter=_job_ids, validator=_distinct_job_ids)


@attrs.frozen
class CheckResponse:
    """Initiator -> participant: of the jobs checked, which are active and which are not.

    ``inactive`` lists the jobs the initiator does not know or has finished: the
    participant releases them. ``active`` lists the ones it knows are running.
    """

    active: tuple[JobId, ...] = attrs.field(converter=_job_ids, validator=_distinct_job_ids)
    inactive: tuple[JobId, ...] = attrs.field(converter=_job_ids, validator=_distinct_job_ids)

    def __attrs_post_init__(self) -> None:
        both = set(self.active) & set(self.inactive)
        if both:
            raise ValueError(f"job {min(both)} is listed as both active and inactive")


JobMessage = Start | Cancel | Batch | FlowControl | Check | CheckResponse

TYPE_OF: Final[dict[type, MessageType]] = {
    Start: MessageType.START,
    Cancel: MessageType.CANCEL,
    Batch: MessageType.BATCH,
    FlowControl: MessageType.FLOW_CONTROL,
    Check: MessageType.CHECK,
    CheckResponse: MessageType.CHECK_RESPONSE,
}
