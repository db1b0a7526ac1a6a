"""``raft-cluster``: a local ØMQ RAFT cluster (on 127.0.0.1 unless ``--host`` says
otherwise) for development and tests,
whose ``raft://`` address goes to ``register-instance --log-store`` and ``ic --registry``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_raft_cluster"]


def _raft_cluster(args: argparse.Namespace) -> int:
    # Imported here: the other commands need neither pyzmq nor the peers' launcher.
    from ..raft.cluster import serve

    return serve(args.dir, args.peers, args.secret, args.host)


def add_raft_cluster(sub: Any) -> None:
    p = sub.add_parser("raft-cluster",
                       help="run a local ØMQ RAFT cluster on 127.0.0.1 (needs `make "
                            "raft-cluster`); prints its raft:// address, runs until stopped",
                       description="Run the peers of a local ØMQ RAFT cluster on 127.0.0.1 "
                                   "and print its raft:// address once it has a leader; "
                                   "SIGINT or SIGTERM stops them. The zmq-raft package comes "
                                   "from `make raft-cluster` (or $AMBROSIA_ZMQ_RAFT).")
    p.add_argument("--dir", required=True, type=Path,
                   help="where the peers' config, logs and data go (kept across restarts)")
    p.add_argument("--peers", type=int, default=3, help="how many peers (default 3)")
    p.add_argument("--secret", default="",
                   help="the cluster's secret (default: none); clients add ?secret=S")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address the peers bind and are reached at (default 127.0.0.1; "
                        "an address of this machine that the other machines can reach)")
    p.set_defaults(handler=_raft_cluster)
