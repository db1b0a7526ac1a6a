"""An RPC a binding sent, as bytes: what a coordinator passes through without decoding
it into a message and encoding it again (the codec's ``outgoing_frames`` makes these)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["OutgoingFrame"]


class OutgoingFrame(NamedTuple):
    """One RPC the binding sent, as bytes."""

    destination: str  # "" for a self-call
    incoming: bytes  # the same call in the form its destination receives
    frame: bytes  # the frame exactly as the binding sent it (what the digest hashes)
    impulse: bool  # an Impulse: not replayed, so not numbered nor in the digest
