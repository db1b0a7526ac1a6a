"""The registry's home directory, its durable file writes, and the link secret."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from ambrosia_py.errors import RegistryError

from ..durable import replace_durably

__all__ = ["HOME_HELP", "ambrosia_home", "link_secret", "write_durably", "write_new_durably"]

# Every command that takes --home says the same (``ambrosia run`` repeats it word for word).
HOME_HELP = "registry directory (default: $AMBROSIA_HOME, else ~/.ambrosia)"


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


def write_durably(path: Path, data: bytes, mode: int = 0o644) -> None:
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
            write_new_durably(path, secrets.token_hex(32).encode("ascii"))
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


def write_new_durably(path: Path, data: bytes) -> None:
    # Two registrations racing must agree on one secret: the second finds it there.
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, data, mode=0o600, exclusive=True)
