"""The local registry: where instances are registered and coordinators find each other.

The real coordinator keeps registrations in Azure tables. Ours keeps them as files:

```
$AMBROSIA_HOME/                 (default ~/.ambrosia)
  link-secret                   32 random bytes (hex); coordinators prove they know it
  instances/<name>.json         one registration per instance
  replicas/<name>/<N>.json      active/active replica N's ports (replica 0: the registration's)
  classes/<name>.json           per version, the MODULE:CLASS `ambrosia run` ran (and from where)
```

Every function takes the home directory explicitly (``home=None`` means "from the
environment"), so two registries can be used in one process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ambrosia_py.errors import CoordinatorError, RegistryError

from .durable import replace_durably
from .logdir import check_log_dir

__all__ = [
    "CREATE_SERVICE_MODES",
    "DEFAULT_KEEP_CHECKPOINTS",
    "HOME_HELP",
    "Registration",
    "ambrosia_home",
    "find_instances",
    "instance_dir",
    "link_secret",
    "load",
    "Replica",
    "add_replica",
    "register",
    "registered_ports",
    "registration_exists",
    "unregistered_free_ports",
    "replica",
    "set_versions",
    "record_class",
    "recorded_class",
]

CREATE_SERVICE_MODES = ("auto", "no-recovery", "always-recover")
DEFAULT_KEEP_CHECKPOINTS = 2
# Every command that takes --home says the same (``ambrosia run`` repeats it word for word).
HOME_HELP = "registry directory (default: $AMBROSIA_HOME, else ~/.ambrosia)"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def ambrosia_home(home: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None) -> Path:
    """The registry directory: ``home`` if given, else ``$AMBROSIA_HOME``, else ``~/.ambrosia``."""
    if home is not None:
        return Path(home)
    env = os.environ if env is None else env
    value = env.get("AMBROSIA_HOME")
    if value:
        return Path(value)
    return Path.home() / ".ambrosia"


def _check_port(what: str, port: int) -> int:
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

    def validate(self) -> Registration:
        check_instance_name(self.instance_name)
        ports = {
            "receive port": _check_port("receive port", self.receive_port),
            "send port": _check_port("send port", self.send_port),
            "ic port": _check_port("ic port", self.ic_port),
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
        if not -(1 << 31) <= self.committer_id < (1 << 31):
            raise RegistryError(f"committer id {self.committer_id} does not fit an int32")
        return self

    @property
    def upgrading(self) -> bool:
        return self.upgrade_version > self.current_version

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
                str if a.name in ("instance_name", "log_dir", "create_service") else int)
            if type(value) is not expected:
                raise RegistryError(f"{where}: field {a.name} should be {expected.__name__}")
        try:
            return reg.validate()
        except RegistryError as err:
            raise RegistryError(f"{where}: {err}") from None


def _instances(home: Path) -> Path:
    return home / "instances"


def _write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, data, mode=mode)


def link_secret(home: str | os.PathLike[str] | None = None, *, create: bool = False) -> bytes:
    """The registry-wide secret that coordinators use to authenticate links."""
    path = ambrosia_home(home) / "link-secret"
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError:
        if not create:
            raise RegistryError(f"no link secret in the registry at {path.parent}") from None
        with contextlib.suppress(FileExistsError):
            _write_atomically_exclusive(path, secrets.token_hex(32).encode("ascii"))
        text = path.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise RegistryError(f"cannot read the link secret {path}: {err}") from None
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise RegistryError(f"the link secret {path} is not hex") from None
    if len(secret) < 16:
        raise RegistryError(f"the link secret {path} is too short")
    return secret


def _write_atomically_exclusive(path: Path, data: bytes) -> None:
    # Two registrations racing must agree on one secret: the second finds it there.
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, data, mode=0o600, exclusive=True)


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
    home: str | os.PathLike[str] | None = None,
) -> Registration:
    """Register (or re-register) an instance. Returns the stored registration.

    The log directory is created if missing, and must take a new file.

    Raises:
        RegistryError: an argument is invalid, a port is another instance's, or the log
            directory cannot be used.
    """
    check_instance_name(instance_name)
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
    ).validate()
    _refuse_taken_ports(home_path, (instance_name, 0),
                        {"receive port": receive_port, "send port": send_port,
                         "ic port": ic_port})
    try:
        check_log_dir(reg.log_dir)
    except CoordinatorError as err:
        raise RegistryError(str(err)) from None
    link_secret(home_path, create=True)
    path = _instances(home_path) / f"{instance_name}.json"
    _write_atomically(path, (json.dumps(reg.to_json(), indent=2) + "\n").encode("utf-8"))
    return reg


def load(name: str, home: str | os.PathLike[str] | None = None) -> Registration:
    """The registration of ``name``.

    Raises:
        RegistryError: not registered, or the file is damaged.
    """
    check_instance_name(name)
    home_path = ambrosia_home(home)
    path = _instances(home_path) / f"{name}.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RegistryError(
            f"instance {name!r} is not registered in {home_path} "
            "(run `ambrosia register-instance` first)"
        ) from None
    except OSError as err:
        raise RegistryError(f"cannot read registration {path}: {err}") from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise RegistryError(f"{path}: not valid JSON: {err}") from None
    reg = Registration.from_json(data, str(path))
    if reg.instance_name != name:
        raise RegistryError(f"{path}: registers {reg.instance_name!r}, not {name!r}")
    return reg


def registration_exists(name: str, home: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``name`` has a registration file (readable or not)."""
    return (_instances(ambrosia_home(home)) / f"{check_instance_name(name)}.json").exists()


def set_versions(name: str, current: int, upgrade: int,
                 home: str | os.PathLike[str] | None = None) -> Registration:
    """Record that ``name`` now runs version ``current`` (a finished live upgrade).

    Raises:
        RegistryError: not registered, or the versions are invalid.
    """
    home_path = ambrosia_home(home)
    reg = attrs.evolve(load(name, home_path), current_version=current,
                       upgrade_version=upgrade).validate()
    path = _instances(home_path) / f"{name}.json"
    _write_atomically(path, (json.dumps(reg.to_json(), indent=2) + "\n").encode("utf-8"))
    return reg


def find_instances(home: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of all registered instances, sorted."""
    d = _instances(ambrosia_home(home))
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.json") if not p.name.startswith("."))


def instance_dir(reg: Registration, version: int | None = None) -> Path:
    """``<log-dir>/<instance>_<version>``, the real coordinator's layout."""
    v = reg.current_version if version is None else version
    return Path(reg.log_dir) / f"{reg.instance_name}_{v}"


# ------------------------------------------------------------------ classes


def _class_path(home: Path, name: str) -> Path:
    return home / "classes" / f"{name}.json"


def _read_classes(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise RegistryError(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise RegistryError(f"{path}: not a class record: {err}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: not a class record (expected a JSON object)")
    return data


def record_class(name: str, version: int, target: str, directory: str | os.PathLike[str],
                 home: str | os.PathLike[str] | None = None) -> None:
    """Remember that version ``version`` of ``name`` runs ``target`` (``MODULE:CLASS``,
    imported from ``directory``), so that ``log dump`` can name its methods.

    Raises:
        RegistryError: the record is damaged, or cannot be read or written.
    """
    path = _class_path(ambrosia_home(home), check_instance_name(name))
    data = _read_classes(path)
    entry = {"class": target, "directory": os.path.abspath(os.fspath(directory))}
    if data.get(str(version)) != entry:
        data[str(version)] = entry
        try:
            _write_atomically(path, (json.dumps(data, indent=2, sort_keys=True) + "\n"
                                     ).encode())
        except OSError as err:
            raise RegistryError(f"cannot write {path}: {err.strerror or err}") from None


def recorded_class(name: str, version: int,
                   home: str | os.PathLike[str] | None = None) -> tuple[str, str] | None:
    """``(MODULE:CLASS, directory)`` recorded for version ``version`` of ``name``, or None.

    Raises:
        RegistryError: the record is damaged or cannot be read.
    """
    path = _class_path(ambrosia_home(home), check_instance_name(name))
    entry = _read_classes(path).get(str(version))
    if entry is None:
        return None
    if not (isinstance(entry, dict) and isinstance(entry.get("class"), str)
            and isinstance(entry.get("directory"), str)):
        raise RegistryError(f"{path}: version {version} is not a class record")
    return entry["class"], entry["directory"]


# ------------------------------------------------------------------ replicas


@attrs.frozen
class Replica:
    """The ports of one active/active replica; ``upgrade_version`` > the instance's
    current version makes it the replica that performs a live upgrade."""

    number: int
    receive_port: int
    send_port: int
    ic_port: int
    upgrade_version: int = 0


def _replica_path(home: Path, name: str, n: int) -> Path:
    return home / "replicas" / name / f"{n}.json"


def add_replica(
    *,
    instance_name: str,
    replica: int,
    receive_port: int,
    send_port: int,
    ic_port: int,
    upgrade_version: int | None = None,
    home: str | os.PathLike[str] | None = None,
) -> Replica:
    """Register replica ``replica`` (>= 1) of an active/active instance.

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
    ports = [_check_port(w, p) for w, p in (("receive port", receive_port),
                                            ("send port", send_port), ("ic port", ic_port))]
    if len(set(ports)) != 3:
        raise RegistryError("receive port, send port and ic port must be three different ports")
    uv = reg.current_version if upgrade_version is None else upgrade_version
    if uv < reg.current_version:
        raise RegistryError(
            f"upgrade version {uv} is below current version {reg.current_version}"
        )
    _refuse_taken_ports(home_path, (instance_name, replica),
                        {"receive port": receive_port, "send port": send_port,
                         "ic port": ic_port})
    rep = Replica(replica, receive_port, send_port, ic_port, uv)
    _write_atomically(_replica_path(home_path, instance_name, replica),
                      (json.dumps(attrs.asdict(rep)) + "\n").encode("utf-8"))
    return rep


def replica(reg: Registration, n: int, home: str | os.PathLike[str] | None = None) -> Replica:
    """Replica ``n`` of ``reg`` (0 is the registration itself).

    Raises:
        RegistryError: not added, or its file is damaged.
    """
    if n == 0:
        return Replica(0, reg.receive_port, reg.send_port, reg.ic_port, reg.upgrade_version)
    path = _replica_path(ambrosia_home(home), reg.instance_name, n)
    try:
        data = json.loads(path.read_bytes())
        rep = Replica(**data)
    except FileNotFoundError:
        raise RegistryError(
            f"replica {n} of {reg.instance_name!r} is not registered (run `ambrosia "
            f"add-replica --instance-name {reg.instance_name} --replica {n} ...`)"
        ) from None
    except (OSError, ValueError, TypeError) as err:
        raise RegistryError(f"{path}: not a replica registration: {err}") from None
    return rep


# ------------------------------------------------------------------ ports in use


def registered_ports(home: str | os.PathLike[str] | None = None
                     ) -> dict[int, tuple[str, int, str]]:
    """Every port the registry hands out: port -> (instance, replica number, which port).

    Raises:
        RegistryError: a registration or replica file is damaged.
    """
    home_path = ambrosia_home(home)
    taken: dict[int, tuple[str, int, str]] = {}
    for name in find_instances(home_path):
        reg = load(name, home_path)
        reps = [replica(reg, 0)]
        if reg.active_active:
            folder = home_path / "replicas" / name
            numbers = sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())
            reps += [replica(reg, n, home_path) for n in numbers if n != 0]
        for rep in reps:
            for which, port in (("receive port", rep.receive_port),
                                ("send port", rep.send_port), ("ic port", rep.ic_port)):
                taken.setdefault(port, (name, rep.number, which))
    return taken


def _refuse_taken_ports(home: Path, me: tuple[str, int], ports: Mapping[str, int]) -> None:
    """Two coordinators cannot listen on one port: refuse a port that another instance (or
    another replica) is registered with. ``me`` (instance, replica) may keep its own."""
    taken = registered_ports(home)
    for mine, port in ports.items():
        owner = taken.get(port)
        if owner is None or owner[:2] == me:
            continue
        name, number, which = owner
        whose = f"instance {name!r}" if number == 0 else f"replica {number} of {name!r}"
        raise RegistryError(
            f"{mine} {port} is already registered to {whose} (its {which}); every instance "
            "and replica needs ports of its own"
        )


def unregistered_free_ports(n: int, home: str | os.PathLike[str] | None = None) -> list[int]:
    """``n`` distinct TCP ports that are free on 127.0.0.1 now and that no registration in
    ``home`` holds (a stopped instance's ports are free, yet still its own)."""
    taken = registered_ports(home)
    while True:
        socks = []
        try:
            for _ in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", 0))
            ports = [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()
        if taken.keys().isdisjoint(ports):
            return ports
