"""The registry's home directory and its durable file writes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ambrosia_core.durable import make_dirs, replace_durably

__all__ = ["HOME_HELP", "ambrosia_home", "write_durably", "write_new_durably"]

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
    make_dirs(path.parent)
    replace_durably(path, data, mode=mode)


def write_new_durably(path: Path, data: bytes) -> None:
    # Two registrations racing must agree on one secret: the second finds it there.
    make_dirs(path.parent)
    replace_durably(path, data, mode=0o600, exclusive=True)
