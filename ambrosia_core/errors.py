"""The errors every process shares: the base of the hierarchy, the wire format's and the
protocol's, a command line's, and a coordinator's failure as the binding sees it.

Every error says whose fault it was: the peer's (``RemoteProtocolError``: bytes that
break the protocol arrived), ours (``LocalProtocolError``: the API was misused), or the
command line's (``UsageError``). The binding adds its own in ``ambrosia_py.errors``, the
coordinator its own in ``ambrosia_ic.errors``.
"""

from __future__ import annotations


class AmbrosiaError(Exception):
    """Base class of every error raised by ambrosia-py."""


class ProtocolError(AmbrosiaError):
    """The AMBROSIA protocol was broken; the connection cannot go on."""


class RemoteProtocolError(ProtocolError, ValueError):
    """The peer sent bytes that break the wire format or the protocol order.

    Attributes:
        offset: stream offset (bytes since the decoder started) where the problem was found.
        seq_id: sequence id of the log record being decoded, if any.
        message_type: the message type byte being decoded, if known.
    """

    def __init__(
        self,
        reason: str,
        *,
        offset: int | None = None,
        seq_id: int | None = None,
        message_type: int | None = None,
    ) -> None:
        self.reason = reason
        self.offset = offset
        self.seq_id = seq_id
        self.message_type = message_type
        where = []
        if offset is not None:
            where.append(f"offset {offset}")
        if seq_id is not None:
            where.append(f"record seq {seq_id}")
        if message_type is not None:
            where.append(f"message type {message_type}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)


class WireFormatError(RemoteProtocolError):
    """Bytes that cannot be decoded: bad varint, wrong length, truncated field."""


class VarintError(WireFormatError):
    """A ZigZag varint is over-long, overflows its width, or is cut short."""


class UnknownMessageTypeError(WireFormatError):
    """A message type byte that AMBROSIA does not define."""


class IllegalDirectionError(WireFormatError):
    """A message type that is defined but illegal in this direction (e.g. TrimTo to a binding)."""


class FrameTooLargeError(WireFormatError):
    """A frame, record or message claims more bytes than the configured bound allows."""


class ChecksumMismatchError(WireFormatError):
    """A log record's XXH64 check bytes do not match its body."""


class SequenceGapError(RemoteProtocolError):
    """Data record sequence ids did not rise by exactly one."""


class UnexpectedMessageError(RemoteProtocolError):
    """A well-formed message arrived in a protocol state where it is not allowed."""


class LocalProtocolError(ProtocolError, RuntimeError):
    """This side misused the protocol, e.g. an Impulse sent while recovering."""


class EncodeError(LocalProtocolError, ValueError):
    """This side asked to encode a value the wire cannot carry (a negative size, a number
    too wide for its varint, a reserved byte or RPC type out of range)."""


class UsageError(AmbrosiaError):
    """A command line asks for something that cannot be used: a class that does not
    import, options that only work together given apart."""


class ArgumentError(UsageError):
    """A command's arguments do not fit what is registered (a new instance without its
    ports): the command's own usage error, exit code 2 as for argparse's."""


class AddressError(UsageError, ValueError):
    """A ``HOST:PORT`` that cannot be used: no port, a port out of range, no host, or an
    IPv6 host without its brackets. The message names the option and the text.

    Attributes:
        detail: what is wrong, in a few words ("" when the text is plainly not HOST:PORT).
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class CodecChoiceError(UsageError, ImportError):
    """``AMBROSIA_PY_CODEC`` names no codec, or asks for the compiled codec that is not
    built."""


class CoordinatorError(AmbrosiaError):
    """The coordinator cannot go on (bad registration, lost lock, broken peer)."""


class ReplayDivergenceError(AmbrosiaError):
    """A replay produced different outputs from the recorded run.

    Attributes:
        seq_id: the first log sequence id at which the outputs diverged.
    """

    def __init__(self, seq_id: int, detail: str = "") -> None:
        self.seq_id = seq_id
        self.detail = detail
        msg = f"replay diverged from the recorded run at sequence id {seq_id}"
        super().__init__(f"{msg}: {detail}" if detail else msg)
