"""``ambrosia tls init DIR [--hosts H1,H2 ...]``: a small private CA and a certificate per
host, for users who have no PKI of their own.

``DIR/ca.pem`` is the CA certificate every process gets as ``--tls-ca``;
``DIR/ca-key.pem`` signs (keep it off the hosts; it is written readable by its owner only).
``DIR/.gitignore`` (unless DIR has one) keeps every private key of DIR out of git, since
DIR is often made inside a repository.
Each host gets ``DIR/HOST.pem`` and ``DIR/HOST-key.pem`` (``--tls-cert``, ``--tls-key``),
valid for both ends of a connection (server and client authentication), naming the host
as an IP address or a DNS name as it is written; the processes on that host dial and are
dialled by that name. A second run with the same DIR keeps the CA and adds the hosts it
lacks, so hosts can be added later; an existing host's files are kept until its certificate
has less than ``RENEW_DAYS`` left, when the run makes new ones (deleting ``DIR/HOST.pem``
makes new ones at once, after a lost key).

Keys are ECDSA P-256: small, fast handshakes, accepted by every TLS 1.2/1.3 stack.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ambrosia_core.durable import replace_durably
from ambrosia_core.errors import UsageError

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

# cryptography is imported where certificates are made or read: it is a fifth of what the
# `ambrosia` command would otherwise load at every start, and only `tls init` uses it.

__all__ = ["CA_DAYS", "GITIGNORE", "HOST_DAYS", "RENEW_DAYS", "TlsInitError", "add_tls",
           "check_host", "init_dir", "issue_host"]

#: Written into DIR unless it has one: the directory is often made inside a repository
#: (the README's `ambrosia tls init pki`), and a private key must never be committed.
GITIGNORE = (b"# Written by `ambrosia tls init`: private keys never go into a repository.\n"
             b"*-key.pem\n*.tmp\n")
CA_DAYS = 3650
# What browsers once capped server certificates at: long enough that a renewal is a yearly
# chore at most, short enough that a lost key is not trusted for ever.
HOST_DAYS = 825
# A run renews a host certificate this close to its end: a monthly run (or one a month
# before the date `tls init` printed) renews it before any process refuses it.
RENEW_DAYS = 30
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


class TlsInitError(UsageError):
    """``tls init`` cannot make or read its files (one line why)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, private: bool) -> None:
    """Write ``path`` whole or not at all; a private key is never readable by others,
    not even for an instant."""
    replace_durably(path, data, mode=0o600 if private else 0o644)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _new_ca(dir_: Path, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ambrosia CA {dir_.name}")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write(dir_ / "ca-key.pem", _key_pem(key), private=True)
    _write(dir_ / "ca.pem", cert.public_bytes(serialization.Encoding.PEM), private=False)
    return cert, key


def _load_ca(dir_: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        cert = x509.load_pem_x509_certificate((dir_ / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((dir_ / "ca-key.pem").read_bytes(), None)
    except (OSError, ValueError) as err:
        raise TlsInitError(f"{dir_} holds a CA that cannot be read: "
                           f"{getattr(err, 'strerror', None) or err}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TlsInitError(f"{dir_}/ca-key.pem is not an ECDSA key (not made by tls init)")
    return cert, key


def _san(host: str) -> x509.GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def check_host(host: str) -> str:
    """``host`` if it is an IP address or a DNS name.

    Raises:
        TlsInitError: neither.
    """
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not _HOST_RE.match(host) or ".." in host:
        raise TlsInitError(f"{host!r} is neither an IP address nor a host name")
    return host


def issue_host(dir_: Path, host: str, *, days: int = HOST_DAYS,
               not_before: datetime.datetime | None = None) -> tuple[Path, Path]:
    """Sign a certificate for ``host`` with ``dir_``'s CA; returns its certificate and
    key files. ``not_before`` (default: now) with ``days`` sets its validity (a test
    makes an expired one so).

    Raises:
        TlsInitError: the CA cannot be read, or ``host`` is no host.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    check_host(host)
    ca_cert, ca_key = _load_ca(dir_)
    key = ec.generate_private_key(ec.SECP256R1())
    start = (not_before or _now()) - datetime.timedelta(minutes=5)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    stem = host.replace(":", "_")  # an IPv6 address names a file too
    cert_path, key_path = dir_ / f"{stem}.pem", dir_ / f"{stem}-key.pem"
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return cert_path, key_path


def _ends(path: Path) -> datetime.datetime | None:
    """When the certificate at ``path`` stops being valid; None if there is none.

    Raises:
        TlsInitError: it cannot be read, or is no certificate.
    """
    from cryptography import x509

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise TlsInitError(f"cannot read {path}: {err.strerror}") from None
    try:
        return x509.load_pem_x509_certificate(data).not_valid_after_utc
    except ValueError:
        raise TlsInitError(f"{path} is not a PEM certificate (delete it and its key to make "
                           "new ones)") from None


def init_dir(dir_: Path, hosts: list[str], *, days: int = HOST_DAYS,
             now: datetime.datetime | None = None) -> list[str]:
    """Make ``dir_``'s CA unless it has one, and a certificate for each host that lacks
    one or whose certificate ends within ``RENEW_DAYS`` of ``now`` (default: the clock);
    returns a line per file made or kept.

    Raises:
        TlsInitError: as ``issue_host``, or the directory cannot be made.
    """
    for host in hosts:
        check_host(host)
    try:
        dir_.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TlsInitError(f"cannot make {dir_}: {err.strerror}") from None
    lines = []
    ignore = dir_ / ".gitignore"
    if not ignore.exists():  # one the user wrote is theirs
        _write(ignore, GITIGNORE, private=False)
        lines.append(f"wrote {ignore}: git ignores the private keys (*-key.pem) here")
    if (dir_ / "ca.pem").exists() or (dir_ / "ca-key.pem").exists():
        _load_ca(dir_)
        lines.append(f"kept the CA {dir_ / 'ca.pem'}")
    else:
        _new_ca(dir_, CA_DAYS)
        lines.append(f"made the CA {dir_ / 'ca.pem'} (its key ca-key.pem signs: keep it "
                     "off the hosts)")
    for host in hosts:
        path = dir_ / f"{host.replace(':', '_')}.pem"
        ends = _ends(path)
        if ends is not None and ends - (now or _now()) > datetime.timedelta(days=RENEW_DAYS):
            lines.append(f"kept {host}: {path} (valid until {ends:%Y-%m-%d}; a run within "
                         f"{RENEW_DAYS} days of that renews it)")
            continue
        cert, key = issue_host(dir_, host, days=days)
        lines.append(f"made {host}: --tls-cert {cert} --tls-key {key} --tls-ca "
                     f"{dir_ / 'ca.pem'}")
    return lines


def _init(args: argparse.Namespace) -> int:
    hosts = [h.strip() for part in args.hosts for h in part.split(",") if h.strip()]
    for line in init_dir(Path(args.dir), hosts or ["localhost", "127.0.0.1"]):
        print(line)
    return 0


def add_tls(sub: Any) -> None:
    p = sub.add_parser("tls", help="TLS certificates: `tls init DIR` makes a private CA "
                                   "and per-host certificates")
    tls_sub = p.add_subparsers(dest="tls_command", required=True, metavar="COMMAND")
    i = tls_sub.add_parser("init", help="make a private CA in DIR (unless there is one) and "
                                        "a certificate for each host (again when its "
                                        f"certificate ends within {RENEW_DAYS} days)")
    i.add_argument("dir", metavar="DIR", help="where the CA and the certificates go")
    i.add_argument("--hosts", action="append", default=[], metavar="H1,H2",
                   help="the hosts (IP addresses or DNS names as the processes dial them; "
                        "repeatable; default: localhost and 127.0.0.1)")
    i.set_defaults(handler=_init)
