"""The link secret: what coordinators prove they know before a link carries a call.

Every coordinator that calls another, or takes calls from it, needs the same secret. It
lives in each registry as ``$AMBROSIA_HOME/link-secret`` (hex, mode 0600); a registry
makes one when its first instance is registered. Machines get it from each other as a
file the operator moves over a channel of their choosing (``export`` here, ``import``
there; or ``ambrosia ic --link-secret-file`` reads one where it is mounted). It is never
put in a Raft cluster: whoever can read the cluster's log could then act as any
coordinator.

Both directions refuse to overwrite a different secret unless forced: a registry whose
secret changed stops taking links from every coordinator still using the old one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path

from ambrosia_core.durable import make_dirs, replace_durably
from ambrosia_ic.errors import RegistryError

from .home import ambrosia_home, write_new_durably

__all__ = ["SECRET_NAME", "export_secret", "fingerprint", "import_secret", "link_secret",
           "read_secret_file"]

SECRET_NAME = "link-secret"
_MIN_BYTES = 16


def _parse(text: str, where: str) -> bytes:
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        raise RegistryError(f"the link secret {where} is not hex") from None
    if len(secret) < _MIN_BYTES:
        raise RegistryError(f"the link secret {where} is too short (at least {_MIN_BYTES} "
                            "bytes, as hex)")
    return secret


def read_secret_file(path: str | os.PathLike[str]) -> bytes:
    """The secret in the file ``path`` (hex, as ``export`` writes it).

    Raises:
        RegistryError: missing, unreadable, not hex, or too short.
    """
    try:
        text = Path(path).read_text("ascii")
    except FileNotFoundError:
        raise RegistryError(f"no link secret file {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RegistryError(f"cannot read the link secret {path}: "
                            f"{getattr(err, 'strerror', None) or err}") from None
    return _parse(text, str(path))


def link_secret(home: str | os.PathLike[str] | None = None, *, create: bool = False) -> bytes:
    """The registry-wide secret that coordinators use to authenticate links.

    Raises:
        RegistryError: there is none (and ``create`` is false), or it is damaged.
    """
    path = ambrosia_home(home) / SECRET_NAME
    if create and not path.exists():
        with contextlib.suppress(FileExistsError):
            write_new_durably(path, secrets.token_hex(32).encode("ascii"))
    if not path.exists():
        raise RegistryError(f"no link secret in the registry at {path.parent} (`ambrosia "
                            "link-secret import FILE` takes one from another machine)")
    return read_secret_file(path)


def fingerprint(secret: bytes) -> str:
    """A short digest to compare secrets on two machines without showing either."""
    return hashlib.sha256(b"ambrosia link secret\0" + secret).hexdigest()[:16]


def export_secret(path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None,
                  *, force: bool = False) -> bytes:
    """Write the registry's secret to ``path`` (mode 0600) for another machine; returns it.

    Raises:
        RegistryError: the registry has no secret, or ``path`` holds something else and
            ``force`` is false, or it cannot be written.
    """
    secret = link_secret(home)
    target = Path(path)
    if target.exists() and not force:
        try:
            there = read_secret_file(target)
        except RegistryError:
            there = None
        if there == secret:
            return secret
        raise RegistryError(f"{target} already exists and does not hold this registry's link "
                            "secret; --force replaces it")
    try:
        replace_durably(target, (secret.hex() + "\n").encode("ascii"), mode=0o600)
    except OSError as err:
        raise RegistryError(f"cannot write {target}: {err.strerror or err}") from None
    return secret


def import_secret(path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None,
                  *, force: bool = False) -> tuple[bytes, bool]:
    """Make the secret in the file ``path`` this registry's. Returns it and whether the
    registry changed (False: it held that secret already).

    Raises:
        RegistryError: the file is not a secret, or the registry holds a different one
            and ``force`` is false, or it cannot be written.
    """
    secret = read_secret_file(path)
    home_path = ambrosia_home(home)
    target = home_path / SECRET_NAME
    if target.exists():
        try:
            mine: bytes | None = read_secret_file(target)
        except RegistryError:
            mine = None  # damaged: replacing it is what --force is for
        if mine == secret:
            return secret, False
        if not force:
            held = f"fingerprint {fingerprint(mine)}" if mine else "damaged"
            raise RegistryError(
                f"the registry at {home_path} has a different link secret ({held}); "
                "coordinators that keep the old one would be refused; --force replaces it")
    try:
        if force:
            make_dirs(home_path)
            replace_durably(target, secret.hex().encode("ascii"), mode=0o600)
        else:
            write_new_durably(target, secret.hex().encode("ascii"))
    except FileExistsError:
        raise RegistryError(f"{target} appeared meanwhile; run the import again") from None
    except OSError as err:
        raise RegistryError(f"cannot write {target}: {err.strerror or err}") from None
    return secret, True
