"""The link handshake: each end proves it knows the registry's link secret, the sender
names itself and the instance it wants, and the receiver says how far it has logged that
sender's calls (the protocol: ``ambrosia_ic.links``).

Both sides are steps with no I/O: the receiver's ``challenge``, ``check_hello`` and
``hello_reply`` (``coordinator.inbound.InboundLink`` runs them), the sender's
``make_hello`` and ``reply_position`` (``outbound.open_link`` runs them over asyncio
streams); the simulator runs the same steps for the links between its coordinators.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

import attrs

from ambrosia_core.errors import RemoteProtocolError
from ambrosia_core.wire import Incomplete, decode_zz32, encode_zz32
from ambrosia_ic.errors import LinkAuthenticationError

__all__ = ["CHALLENGE_SIZE", "HANDSHAKE_TIMEOUT", "HELLO_MAX", "LINK_MAGIC", "REPLY_SIZE",
           "Hello", "challenge", "check_hello", "hello_reply", "make_hello", "not_registered",
           "reply_position"]

# Version 2: records carry runs of calls (version 1 carried one call per record).
LINK_MAGIC = b"AMBRLNK2"
_NONCE = 16
_MAC = 32
_I64 = struct.Struct("<q")
HANDSHAKE_TIMEOUT = 10.0
CHALLENGE_SIZE = len(LINK_MAGIC) + _NONCE
REPLY_SIZE = _MAC + 8  # the receiver's proof and the last call it logged from the sender


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def _name(s: str) -> bytes:
    raw = s.encode("utf-8")
    return encode_zz32(len(raw)) + raw


# The longest hello a sender sends: two names of at most 128 bytes with their lengths,
# its nonce and its proof.
HELLO_MAX = 2 * (5 + 128) + _NONCE + _MAC


def challenge() -> tuple[bytes, bytes]:
    """The receiver's first bytes, and the nonce they carry."""
    nonce_s = os.urandom(_NONCE)
    return LINK_MAGIC + nonce_s, nonce_s


def _hello_name(buf: bytes | bytearray, pos: int) -> tuple[str, int] | None:
    try:
        n, body = decode_zz32(buf, pos)
    except Incomplete:
        return None
    except RemoteProtocolError:  # an over-long or overflowing length
        raise LinkAuthenticationError("malformed link handshake") from None
    if not 0 < n <= 128:
        raise LinkAuthenticationError(f"link handshake names an instance of {n} bytes")
    if len(buf) < body + n:
        return None
    try:
        return bytes(buf[body : body + n]).decode("utf-8"), body + n
    except UnicodeDecodeError:
        raise LinkAuthenticationError("link handshake name is not UTF-8") from None


@attrs.frozen
class Hello:
    """A sender's hello whose proof checked: who it is, its nonce, and the bytes it took."""

    sender: str
    nonce_c: bytes
    used: int


def check_hello(buf: bytes | bytearray, nonce_s: bytes, secret: bytes,
                my_name: str) -> Hello | None:
    """Receiver side of the handshake, sans-IO: the sender's hello at the start of
    ``buf`` checked, or None while it is incomplete. Whether the sender may link
    (the link server's ``known``) is asked separately: it may take a lookup.

    Raises:
        LinkAuthenticationError: the hello is malformed, or the peer did not prove it
            knows the secret, or wants another instance.
    """
    got = _hello_name(buf, 0)
    if got is None:
        return None
    sender, pos = got
    got = _hello_name(buf, pos)
    if got is None:
        return None
    dest, pos = got
    end = pos + _NONCE + _MAC
    if len(buf) < end:
        return None
    nonce_c = bytes(buf[pos : pos + _NONCE])
    proof = bytes(buf[pos + _NONCE : end])
    expected = _mac(secret, b"C", nonce_s, nonce_c, sender.encode(), b"\0", dest.encode())
    if not hmac.compare_digest(proof, expected):
        raise LinkAuthenticationError(
            f"peer claiming to be {sender!r} failed the link authentication"
        )
    if dest != my_name:
        raise LinkAuthenticationError(f"peer {sender!r} wanted {dest!r}, this is {my_name!r}")
    return Hello(sender, nonce_c, end)


def not_registered(sender: str) -> LinkAuthenticationError:
    return LinkAuthenticationError(f"peer {sender!r} is not a registered instance")


def hello_reply(secret: bytes, hello: Hello, nonce_s: bytes, last_logged: int) -> bytes:
    """The receiver's answer to an admitted hello: its proof and the last call logged."""
    return _mac(secret, b"S", hello.nonce_c, nonce_s) + _I64.pack(last_logged)


def make_hello(head: bytes, secret: bytes, my_name: str, dest: str,
               where: str) -> tuple[bytes, bytes]:
    """Sender side, sans-IO: the hello answering the receiver's first ``CHALLENGE_SIZE``
    bytes ``head``, and the nonce it carries.

    Raises:
        LinkAuthenticationError: the peer at ``where`` does not speak the link protocol.
    """
    if head[: len(LINK_MAGIC)] != LINK_MAGIC:
        raise LinkAuthenticationError(f"{where} does not speak the link protocol")
    nonce_s = head[len(LINK_MAGIC):]
    nonce_c = os.urandom(_NONCE)
    return (_name(my_name) + _name(dest) + nonce_c
            + _mac(secret, b"C", nonce_s, nonce_c, my_name.encode(), b"\0", dest.encode()),
            nonce_c)


def reply_position(reply: bytes, secret: bytes, head: bytes, nonce_c: bytes, dest: str,
                   where: str) -> int:
    """Sender side, sans-IO: the receiver's ``REPLY_SIZE``-byte answer checked; the last
    link sequence number it has durably logged from us (we resend what follows).

    Raises:
        LinkAuthenticationError: the peer did not prove it knows the secret.
    """
    nonce_s = head[len(LINK_MAGIC):]
    if not hmac.compare_digest(reply[:_MAC], _mac(secret, b"S", nonce_c, nonce_s)):
        raise LinkAuthenticationError(f"the peer at {where} failed to prove it is {dest!r}")
    return int(_I64.unpack_from(reply, _MAC)[0])
