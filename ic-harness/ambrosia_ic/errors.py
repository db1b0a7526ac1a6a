"""The coordinator's own errors: its registry, its log files, its links and its lease."""

from __future__ import annotations

from ambrosia_core.errors import CoordinatorError


class RegistryError(CoordinatorError):
    """A registration is missing, duplicated or malformed."""


class LogCorruptionError(CoordinatorError):
    """A log or checkpoint file is damaged somewhere other than its torn tail."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: damaged at offset {offset}: {reason}")


class MissingLogError(LogCorruptionError):
    """A log file that was written is gone: a checkpoint or a later log shows it existed."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.offset = 0
        self.reason = reason
        CoordinatorError.__init__(self, f"{path}: missing: {reason}")


class LogStoreError(CoordinatorError):
    """A log store (a Raft cluster's log, say, where registrations are published too) did
    not do what was asked: unreachable, or it refused. The store's adapter raises it, so
    that what reads through a port knows no store's own errors."""


class LinkAuthenticationError(CoordinatorError):
    """A coordinator-to-coordinator link peer did not prove it knows the shared secret."""


class LockLostError(CoordinatorError):
    """An active/active primary lost (or never held) the log lock; it must stop writing."""


class VersionSupersededError(CoordinatorError):
    """The registration names a newer version than a replica runs: it stops, having
    written nothing (a live upgrade of its replica set committed)."""
