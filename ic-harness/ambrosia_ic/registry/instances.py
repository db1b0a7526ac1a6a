"""Reading registrations, and recording a finished upgrade.

A registration file carries check bytes (``check``: XXH64 of its other fields, in a
canonical JSON form): a bit flipped anywhere in it, which could still read as valid JSON
with another port, committer id or log directory, is refused in one line instead of
being used. A file without them (written before they existed) is read as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import xxhash

from ambrosia_ic.errors import RegistryError

from .home import ambrosia_home, write_durably
from .registration import Registration, check_instance_name

__all__ = ["find_instances", "has_started", "instance_dir", "instances_dir", "load",
           "mark_started", "registration_exists", "registration_json", "set_versions",
           "start_afresh"]

_STARTED = ".started"  # beside NAME.json: the instance's first start was logged
CHECK_FIELD = "check"


def _check_of(data: dict[str, object]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return xxhash.xxh64_hexdigest(canonical.encode("ascii"))


def instances_dir(home: Path) -> Path:
    return home / "instances"


def load(name: str, home: str | os.PathLike[str] | None = None) -> Registration:
    """The registration of ``name``.

    Raises:
        RegistryError: not registered, or the file is damaged.
    """
    check_instance_name(name)
    home_path = ambrosia_home(home)
    path = instances_dir(home_path) / f"{name}.json"
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
    if isinstance(data, dict) and CHECK_FIELD in data:
        stored = data.pop(CHECK_FIELD)
        if stored != _check_of(data):
            raise RegistryError(
                f"{path}: damaged: its check bytes do not match its contents (a bit "
                "flipped, or it was edited by hand); restore it from a copy, or register "
                f"{name} again with `ambrosia register-instance` (a new registration has a "
                "new committer id: its old logs are not taken as its own)")
    reg = Registration.from_json(data, str(path))
    if reg.instance_name != name:
        raise RegistryError(f"{path}: registers {reg.instance_name!r}, not {name!r}")
    if reg.log_dir and not os.path.isabs(reg.log_dir):
        # Logs kept in the home are named relative to it, so a home copied or moved
        # whole takes its logs along.
        reg = attrs.evolve(reg, log_dir=os.path.join(os.path.abspath(home_path), reg.log_dir))
    return reg


def registration_json(reg: Registration, home: Path) -> bytes:
    """The file's bytes: a log directory inside the home is kept relative to it."""
    data = reg.to_json()
    base = os.path.abspath(home)
    if reg.log_dir and os.path.commonpath([base, os.path.abspath(reg.log_dir)]) == base:
        data["log_dir"] = os.path.relpath(os.path.abspath(reg.log_dir), base)
    data[CHECK_FIELD] = _check_of(data)
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def _started_path(name: str, home: str | os.PathLike[str] | None) -> Path:
    return instances_dir(ambrosia_home(home)) / f"{check_instance_name(name)}{_STARTED}"


def mark_started(name: str, home: str | os.PathLike[str] | None = None) -> None:
    """Record, durably and once, that ``name``'s first start was logged: from then on an
    empty or missing log directory is a history gone astray, never a first start."""
    path = _started_path(name, home)
    if not path.exists():
        write_durably(path, b"the first start of this instance was logged\n")


def has_started(name: str, home: str | os.PathLike[str] | None = None) -> bool:
    return _started_path(name, home).exists()


def start_afresh(name: str, home: str | os.PathLike[str] | None = None) -> bool:
    """Forget that ``name`` ever started (its next start on an empty log directory is a
    first start again); whether it had."""
    try:
        os.unlink(_started_path(name, home))
    except FileNotFoundError:
        return False
    return True


def registration_exists(name: str, home: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``name`` has a registration file (readable or not)."""
    return (instances_dir(ambrosia_home(home)) / f"{check_instance_name(name)}.json").exists()


def set_versions(name: str, current: int, upgrade: int,
                 home: str | os.PathLike[str] | None = None) -> Registration:
    """Record that ``name`` now runs version ``current`` (a finished live upgrade).

    Raises:
        RegistryError: not registered, or the versions are invalid.
    """
    home_path = ambrosia_home(home)
    reg = attrs.evolve(load(name, home_path), current_version=current,
                       upgrade_version=upgrade).validate()
    path = instances_dir(home_path) / f"{name}.json"
    write_durably(path, registration_json(reg, home_path))
    return reg


def find_instances(home: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of all registered instances, sorted."""
    d = instances_dir(ambrosia_home(home))
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.json") if not p.name.startswith("."))


def instance_dir(reg: Registration, version: int | None = None) -> Path:
    """``<log-dir>/<instance>_<version>``, the real coordinator's layout."""
    v = reg.current_version if version is None else version
    return Path(reg.log_dir) / f"{reg.instance_name}_{v}"
