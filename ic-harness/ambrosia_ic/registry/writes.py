"""Registering an instance and adding a replica (both refuse ports already taken)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets

import attrs

from ambrosia_core.errors import CoordinatorError
from ambrosia_ic.errors import RegistryError

from ..logdir import check_log_dir
from .home import ambrosia_home, write_durably
from .hosts import LOOPBACK, link_hosts
from .instances import instances_dir, load, registration_json
from .ports import refuse_taken_ports
from .published import adopted_marker
from .registration import (
    DEFAULT_KEEP_CHECKPOINTS,
    DEFAULT_LEASE_MS,
    Registration,
    check_instance_name,
    check_port,
)
from .replicas import Replica, replica_path
from .secret import link_secret

__all__ = ["add_replica", "register"]


def register(
    *,
    instance_name: str,
    receive_port: int,
    send_port: int,
    ic_port: int,
    log_dir: str | os.PathLike[str],
    current_version: int = 0,
    upgrade_version: int | None = None,
    active_active: bool = False,
    log_trigger_size_mb: int = 1000,
    create_service: str = "auto",
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
    log_store: str = "",
    ic_host: str = LOOPBACK,
    advertise_host: str | None = None,
    lease_ms: int = DEFAULT_LEASE_MS,
    publish: str = "",
    home: str | os.PathLike[str] | None = None,
) -> Registration:
    """Register (or re-register) an instance. Returns the stored registration.

    The log directory is created if missing, and must take a new file. ``ic_host`` is
    where the link server listens, ``advertise_host`` what others dial (default: the
    same; required when ``ic_host`` is a wildcard such as 0.0.0.0).

    Raises:
        RegistryError: an argument is invalid, a port is another instance's, or the log
            directory cannot be used.
    """
    check_instance_name(instance_name)
    ic_host, advertise = link_hosts(ic_host, advertise_host)
    home_path = ambrosia_home(home)
    committer_id = secrets.randbits(32) - (1 << 31)
    with contextlib.suppress(RegistryError):
        committer_id = load(instance_name, home_path).committer_id
    reg = Registration(
        instance_name=instance_name,
        receive_port=receive_port,
        send_port=send_port,
        ic_port=ic_port,
        log_dir=os.path.abspath(os.fspath(log_dir)) if os.fspath(log_dir) else "",
        committer_id=committer_id,
        current_version=current_version,
        upgrade_version=current_version if upgrade_version is None else upgrade_version,
        active_active=active_active,
        log_trigger_size_mb=log_trigger_size_mb,
        create_service=create_service,
        keep_checkpoints=keep_checkpoints,
        log_store=log_store,
        ic_host=ic_host,
        advertise_host=advertise,
        lease_ms=lease_ms,
        publish=publish,
    ).validate()
    refuse_taken_ports(home_path, (instance_name, 0),
                        {"receive port": receive_port, "send port": send_port,
                         "ic port": ic_port}, advertise)
    try:
        check_log_dir(reg.log_dir)
    except CoordinatorError as err:
        raise RegistryError(str(err)) from None
    link_secret(home_path, create=True)
    # Registered here now: a registration taken from a cluster is never refreshed over it
    # (the mark goes first, so a crash in between leaves a local one, not a refreshable one).
    with contextlib.suppress(FileNotFoundError):
        os.unlink(adopted_marker(home_path, instance_name))
    path = instances_dir(home_path) / f"{instance_name}.json"
    write_durably(path, registration_json(reg, home_path))
    return reg


def add_replica(
    *,
    instance_name: str,
    replica: int,
    receive_port: int,
    send_port: int,
    ic_port: int,
    upgrade_version: int | None = None,
    ic_host: str = LOOPBACK,
    advertise_host: str | None = None,
    home: str | os.PathLike[str] | None = None,
) -> Replica:
    """Register replica ``replica`` (>= 1) of an active/active instance, its link server
    on ``ic_host``, dialled at ``advertise_host`` (as ``register``'s).

    Raises:
        RegistryError: the instance is not registered as active/active, or a port is bad.
    """
    home_path = ambrosia_home(home)
    reg = load(instance_name, home_path)
    if not reg.active_active:
        raise RegistryError(
            f"instance {instance_name!r} is not active/active: register it with "
            "--active-active before adding replicas"
        )
    if not isinstance(replica, int) or not 1 <= replica < 1 << 16:
        raise RegistryError(f"replica number must be 1..65535, got {replica!r}")
    ports = [check_port(w, p) for w, p in (("receive port", receive_port),
                                            ("send port", send_port), ("ic port", ic_port))]
    if len(set(ports)) != 3:
        raise RegistryError("receive port, send port and ic port must be three different ports")
    uv = reg.current_version if upgrade_version is None else upgrade_version
    if uv < reg.current_version:
        raise RegistryError(
            f"upgrade version {uv} is below current version {reg.current_version}"
        )
    host, advertise = link_hosts(ic_host, advertise_host)
    refuse_taken_ports(home_path, (instance_name, replica),
                        {"receive port": receive_port, "send port": send_port,
                         "ic port": ic_port}, advertise)
    rep = Replica(replica, receive_port, send_port, ic_port, uv, host, advertise)
    write_durably(replica_path(home_path, instance_name, replica),
                      (json.dumps(attrs.asdict(rep)) + "\n").encode("utf-8"))
    return rep
