"""One registered instance, and the checks on names and ports every registration passes."""

from __future__ import annotations

import re
from typing import Any

import attrs

from ambrosia_ic.errors import RegistryError

from .hosts import LOOPBACK, check_host, link_hosts
from .raft_address import parse_address

__all__ = ["CREATE_SERVICE_MODES", "DEFAULT_KEEP_CHECKPOINTS", "DEFAULT_LEASE_MS", "MAX_LEASE_MS",
           "MIN_LEASE_MS", "Registration",
           "check_instance_name",
           "check_port"]

CREATE_SERVICE_MODES = ("auto", "no-recovery", "always-recover")
DEFAULT_KEEP_CHECKPOINTS = 2
# The lease of a log kept in a cluster, no command-line option: since each standby watches
# the primary's link, a killed primary's coordinator is replaced within 150 ms whatever the
# lease (bench/README.md, bench_raft), so it bounds only the takeover of a primary that is
# paused, cut off or whose machine died, where 1 s rides out a loaded machine's stalls.
DEFAULT_LEASE_MS = 1000
# A lease below a Raft round trip or two would move the primary at every hiccup.
MIN_LEASE_MS = 100
MAX_LEASE_MS = 600_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_port(what: str, port: int) -> int:
    if not isinstance(port, int) or not 0 < port < 65536:
        raise RegistryError(f"{what} must be a TCP port number 1..65535, got {port!r}")
    return port


def check_instance_name(name: str) -> str:
    """Instance names become file and directory names, so keep them plain."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistryError(
            f"instance name {name!r} is not allowed: use letters, digits, '_', '.', '-' "
            "(starting with a letter or digit, at most 128 characters)"
        )
    return name


@attrs.frozen
class Registration:
    """One registered instance, as ``RegisterInstance`` records it.

    ``committer_id`` is stamped into every log record header; it is chosen at random the
    first time an instance is registered and kept when the instance is registered again
    (for instance to change versions before an upgrade).
    """

    instance_name: str
    receive_port: int
    send_port: int
    ic_port: int
    log_dir: str
    committer_id: int
    current_version: int = 0
    upgrade_version: int = 0
    active_active: bool = False
    log_trigger_size_mb: int = 1000
    create_service: str = "auto"
    # How many checkpoints (with their logs and digests) stay after each new one, so a
    # repro can start before the latest restart. Registrations written before this
    # option existed load with the default.
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS
    # Where the log lives: "" for files in log_dir (the default), or a ØMQ RAFT cluster
    # (``raft://HOST:PORT,...[?secret=S]``) so replicas need no shared file system.
    log_store: str = ""
    # Where replica 0's link server listens, and the host other coordinators dial (its
    # epoch claims name it). Registrations written before these existed load as 127.0.0.1.
    ic_host: str = LOOPBACK
    advertise_host: str = LOOPBACK
    # With the log in a cluster: a standby that saw nothing of the primary this long
    # claims the next epoch (the primary renews it every fifth of it). Only availability
    # rests on it: a primary paused past it is fenced by the log's order.
    lease_ms: int = DEFAULT_LEASE_MS
    # A ØMQ RAFT cluster the registration is also published in (``--publish``), for
    # callees and replicas elsewhere; each change to it is published there again.
    publish: str = ""

    def validate(self) -> Registration:
        check_instance_name(self.instance_name)
        ports = {
            "receive port": check_port("receive port", self.receive_port),
            "send port": check_port("send port", self.send_port),
            "ic port": check_port("ic port", self.ic_port),
        }
        if len(set(ports.values())) != 3:
            raise RegistryError(
                "receive port, send port and ic port must be three different ports, got "
                + ", ".join(f"{k} {v}" for k, v in ports.items())
            )
        if not self.log_dir:
            raise RegistryError("a log directory is required")
        if self.current_version < 0 or self.upgrade_version < 0:
            raise RegistryError("versions must not be negative")
        if self.upgrade_version and self.upgrade_version < self.current_version:
            raise RegistryError(
                f"upgrade version {self.upgrade_version} is below current version "
                f"{self.current_version}"
            )
        if self.log_trigger_size_mb < 1:
            raise RegistryError(
                f"log trigger size must be at least 1 MB, got {self.log_trigger_size_mb}"
            )
        if self.create_service not in CREATE_SERVICE_MODES:
            raise RegistryError(
                f"create-service must be one of {', '.join(CREATE_SERVICE_MODES)}, "
                f"got {self.create_service!r}"
            )
        if self.keep_checkpoints < 1:
            raise RegistryError(
                f"keep-checkpoints must be at least 1, got {self.keep_checkpoints}"
            )
        check_host("ic host", self.ic_host)
        check_host("advertised host", self.advertise_host)
        link_hosts(self.ic_host, self.advertise_host)
        if self.log_store or self.publish:
            if self.log_store:
                parse_address(self.log_store)
            if self.publish:
                parse_address(self.publish)
        if not MIN_LEASE_MS <= self.lease_ms <= MAX_LEASE_MS:
            raise RegistryError(f"lease must be {MIN_LEASE_MS}..{MAX_LEASE_MS} ms, got "
                                f"{self.lease_ms}")
        if not -(1 << 31) <= self.committer_id < (1 << 31):
            raise RegistryError(f"committer id {self.committer_id} does not fit an int32")
        return self

    @property
    def upgrading(self) -> bool:
        return self.upgrade_version > self.current_version

    @property
    def log_key(self) -> str:
        """The instance's log in a Raft cluster: its name and committer id, so an instance
        registered afresh under an old name (a new committer id) starts a log of its own
        instead of recovering a stranger's history."""
        return f"{self.instance_name}.{self.committer_id & 0xFFFFFFFF:08x}"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> Registration:
        if not isinstance(data, dict):
            raise RegistryError(f"{where}: not a registration (expected a JSON object)")
        names = {a.name for a in attrs.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise RegistryError(f"{where}: unknown fields {sorted(unknown)}")
        try:
            reg = cls(**data)
        except TypeError as err:
            raise RegistryError(f"{where}: {err}") from None
        for a in attrs.fields(cls):
            value = getattr(reg, a.name)
            expected = bool if a.name == "active_active" else (
                str if a.name in ("instance_name", "log_dir", "create_service", "log_store",
                                "ic_host", "advertise_host", "publish")
                else int)
            if type(value) is not expected:
                raise RegistryError(f"{where}: field {a.name} should be {expected.__name__}")
        try:
            return reg.validate()
        except RegistryError as err:
            raise RegistryError(f"{where}: {err}") from None
