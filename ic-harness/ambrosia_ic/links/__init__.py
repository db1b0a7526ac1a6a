"""Links between coordinators: authentication, framing, resend and acknowledgement.

One TCP connection carries one direction of calls, from a sender coordinator to the
coordinator of the destination instance (two instances calling each other use two
connections). The protocol is ours; the real coordinators talk through CRA instead.

Handshake (before anything else; ``S`` = receiver, ``C`` = sender)::

    S -> C  b"AMBRLNK1" + nonce_s (16 bytes)
    C -> S  zz32 len + sender name, zz32 len + destination name, nonce_c (16),
            HMAC-SHA256(secret, b"C" + nonce_s + nonce_c + sender + b"\\0" + destination)
    S -> C  HMAC-SHA256(secret, b"S" + nonce_c + nonce_s), int64 last logged seq number

``secret`` is the registry's link secret. With TLS (``ambrosia_core.tls``: ``ambrosia ic
--tls-cert/--tls-key/--tls-ca``) the connection is TLS from its first byte, both ends
showing a certificate the other's CA trusts, and all of the above travels inside it: the
handshake still proves the instance names, and TLS keeps the records that follow secret
and refuses any altered, replayed or cut on the way (without TLS they travel in clear).
A peer that fails its proof, or names an instance that is not registered (nor published
in the cluster the receiver reads registrations from), is refused (the receiver logs it
and closes).

Then ``C -> S``: log records (the wire codec's records, ``Direction.LINK``) of
incoming-form ``Rpc`` frames. Each call has a link sequence number (1, 2, ... per sender
and destination); a record carries a run of consecutive calls, and its sequence id is the
number of the last one (so a record of ``k`` calls with id ``n`` holds ``n-k+1 .. n``).
Impulses are not reproduced by a sender's replay, so they travel unnumbered in control
records (sequence id -1), at most once. ``S -> C``:
``TrimTo(n)`` messages once the receiver has durably logged everything up to ``n``.
The sender keeps what is not yet trimmed and resends it after a reconnect from the
position the receiver reports; the receiver drops numbers it has already accepted.

The pieces: ``handshake`` (both ends' proofs as steps with no I/O; the receiver's side
runs in ``coordinator.inbound``), ``outbox.LinkOutbox`` (what a sender keeps and writes
when, without I/O: the coordinator's core owns one per destination) and ``outbound``
(``open_link``, and ``OutboundLink``: the sender's task that connects, writes and reads the
acknowledgements).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .handshake import (
    HANDSHAKE_TIMEOUT,
    HELLO_MAX,
    LINK_MAGIC,
    Hello,
    challenge,
    check_hello,
    hello_reply,
    not_registered,
)
from .outbox import MAX_RECORD_BODY, LinkOutbox

if TYPE_CHECKING:
    from .outbound import MOVE_CHECK, OutboundLink, open_link

__all__ = ["HANDSHAKE_TIMEOUT", "HELLO_MAX", "LINK_MAGIC", "MAX_RECORD_BODY", "MOVE_CHECK",
           "Hello", "LinkOutbox", "OutboundLink", "challenge", "check_hello", "hello_reply",
           "not_registered", "open_link"]

# The outbound link does I/O (asyncio, ssl): it loads when first named, so the
# coordinator's core, which keeps a LinkOutbox per destination, and the inbound link's
# rules import no I/O through this package.
_LAZY = frozenset({"MOVE_CHECK", "OutboundLink", "open_link"})


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(".outbound", __name__), name)
