"""A long sweep of the simulation: ``python -m tests.sim --seeds N [--first K]``
(``make chaos`` runs one). Every tenth seed also runs the world with its replicas' log in
a simulated Raft cluster (``raftstore``). Prints each failing seed with a shortest run
that fails, and a summary; exits 1 if any seed failed."""

from __future__ import annotations

import argparse
import collections
import sys
import time

from tests.sim import raftstore
from tests.sim.world import Scenario, SimFailure, explain, explain_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100_000, help="how many seeds")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    args = parser.parse_args(argv)
    start = time.monotonic()
    seen: collections.Counter[str] = collections.Counter()
    failed = []
    raft: collections.Counter[str] = collections.Counter()
    for seed in range(args.first, args.first + args.seeds):
        try:
            seen.update(Scenario.of(seed).run().counts)
        except SimFailure:
            failed.append(seed)
            print(explain(seed), flush=True)
        if seed % 10 == 0:
            raft["runs"] += 1
            try:
                raft.update(raftstore.scenario(seed).run().counts)
            except SimFailure:
                raft["failed"] += 1
                print(f"Raft-backed {explain_seed(seed, raftstore.scenario)}", flush=True)
    took = time.monotonic() - start
    print(f"{args.seeds} simulated runs (seeds {args.first}..{args.first + args.seeds - 1}) "
          f"in {took:.0f} s: {len(failed)} failed; crashes {seen['crash']}, recoveries "
          f"{seen['recovered']}, checkpoints {seen['checkpoint']}, dropped connections "
          f"{seen['drop']}, partitions {seen['cut']}, resent overlaps {seen['overlap']}, "
          f"paused primaries {seen['pause']}, takeovers {seen['takeover']}, fenced "
          f"primaries stopped {seen['fenced']}, checkpoints by a secondary "
          f"{seen['secondary']}, files pruned {seen['pruned']}, live upgrades done "
          f"{seen['upgraded']}, registrations flipped {seen['flip-registration']}, Raft "
          f"primaries fenced {seen['raft fenced']} and renewed {seen['raft renewed']}; "
          f"Raft-backed runs {raft['runs']} ({raft['failed']} failed): takeovers "
          f"{raft['raft takeover']}, renewals {raft['raft renewed']}, fenced primaries "
          f"{raft['fenced']}, checkpoints {raft['raft checkpoint']}")
    return 1 if failed or raft["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
