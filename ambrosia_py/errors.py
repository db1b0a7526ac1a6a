"""The errors of the binding and the framework, with the shared ones they build on.

Every error says whose fault it was: the peer's (``RemoteProtocolError``: bytes that
break the protocol arrived), ours (``LocalProtocolError``: the API was misused), the
user's class (``ImmortalDefinitionError``), or the disk's (a coordinator's
``LogCorruptionError``). The shared ones live in ``ambrosia_core.errors`` and are
re-exported here, so that an application catches everything from one module.
"""

from __future__ import annotations

from ambrosia_core.errors import (
    AmbrosiaError,
    ArgumentError,
    ChecksumMismatchError,
    CodecChoiceError,
    CoordinatorError,
    EncodeError,
    FrameTooLargeError,
    IllegalDirectionError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    ReplayDivergenceError,
    SequenceGapError,
    UnexpectedMessageError,
    UnknownMessageTypeError,
    UsageError,
    VarintError,
    WireFormatError,
)

__all__ = [
    "AmbrosiaError",
    "ProtocolError",
    "RemoteProtocolError",
    "WireFormatError",
    "VarintError",
    "UnknownMessageTypeError",
    "IllegalDirectionError",
    "FrameTooLargeError",
    "ChecksumMismatchError",
    "SequenceGapError",
    "UnexpectedMessageError",
    "LocalProtocolError",
    "EncodeError",
    "UsageError",
    "ArgumentError",
    "CodecChoiceError",
    "CoordinatorError",
    "ReplayDivergenceError",
    "ImpulseDuringRecoveryError",
    "AlreadyUpgradedError",
    "ImmortalDefinitionError",
    "UpgradeError",
    "SideEffectError",
    "SerializationError",
    "RemoteCallError",
    "JournalLimitError",
    "UnknownMethodError",
]

class ImpulseDuringRecoveryError(LocalProtocolError):
    """An Impulse was sent before the instance became primary (the protocol forbids it)."""


class AlreadyUpgradedError(LocalProtocolError):
    """An upgrade test was asked of a checkpoint that already holds the new version (the
    instance was upgraded live); the test must replay the version before the upgrade."""


class ImmortalDefinitionError(AmbrosiaError, TypeError):
    """An Immortal class is malformed; the message lists every problem found."""

    def __init__(self, cls_name: str, problems: list[str]) -> None:
        self.problems = list(problems)
        n = len(problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"Invalid immortal class {cls_name} for {n} reason{'s' if n != 1 else ''}:\n{lines}"
        )


class UpgradeError(AmbrosiaError, TypeError):
    """A live upgrade (or an upgrade test) cannot convert VCurrent's state to VNext's: the
    new class keeps its state differently and does not say how to convert it."""


class SideEffectError(AmbrosiaError):
    """A side effect of the primary (a task started with ``ctx.spawn``) ended with an
    error: the instance stops, saying which, in one line."""


class SerializationError(AmbrosiaError, ValueError):
    """Arguments, results or state could not be serialized or deserialized."""


class RemoteCallError(AmbrosiaError):
    """An async/await RPC raised an exception in the callee; ``remote_type`` names its class."""

    def __init__(self, message: str, remote_type: str = "Exception") -> None:
        self.remote_type = remote_type
        self.remote_message = message
        super().__init__(f"{remote_type}: {message}")


class JournalLimitError(AmbrosiaError):
    """An awaited call was abandoned: while handlers were suspended, the inputs every
    checkpoint must carry passed the class's ``journal_limit_bytes``."""


class UnknownMethodError(AmbrosiaError, LookupError):
    """An RPC named a method id the immortal does not publish."""
