"""Where callers here last saw a callee's epoch claim in a Raft cluster's log.

Finding a Raft-backed callee's primary means reading its claims from the cluster's log,
and the protocol has no index by instance: without a place to start, every new link
reads the whole log, every instance's entries. A caller that followed the log to a
valid claim remembers its index and epoch here (``claims/<log key>.json``), so the next
link starts from it. Only a hint: a caller that finds no such claim there reads from
the start (``coordinator.cluster_primary``).
"""

from __future__ import annotations

import contextlib
import json
import os

from .home import ambrosia_home, write_durably

__all__ = ["remember_claim", "remembered_claim"]


def remember_claim(home: str | os.PathLike[str] | None, cluster: str, key: str, index: int,
                   epoch: int) -> None:
    """Note that the claim of ``epoch`` at ``index`` in ``cluster``'s log ``key`` is valid
    (a registry that cannot take the note loses the hint, nothing else)."""
    doc = {"cluster": cluster, "index": index, "epoch": epoch}
    with contextlib.suppress(OSError):
        write_durably(ambrosia_home(home) / "claims" / f"{key}.json", json.dumps(doc).encode())


def remembered_claim(home: str | os.PathLike[str] | None, cluster: str, key: str
                     ) -> tuple[int, int] | None:
    """``(index, epoch)`` of the newest claim remembered for ``key`` in ``cluster`` (None:
    none, or unreadable: a hint lost costs a longer read, nothing else)."""
    try:
        doc = json.loads((ambrosia_home(home) / "claims" / f"{key}.json").read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("cluster") != cluster:
        return None
    index, epoch = doc.get("index"), doc.get("epoch")
    if type(index) is int and type(epoch) is int and index > 0 and epoch > 0:
        return index, epoch
    return None
