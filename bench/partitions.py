"""Network partitions on the real kernel, seeded: an active/active instance S (three
replicas) and its caller C, each coordinator in its own network namespace, the log in a
three-peer Raft cluster on a node of its own or in files, while C streams numbered calls.

F times, a fault drawn from the seed hits the set, lasts a drawn time and heals:

- ``full``: the primary cut off from the cluster and the other replicas, both ways;
- ``one-way-out`` / ``one-way-in``: only what it sends, or only what it hears, is lost;
- ``flap``: such a cut of whoever is primary, on and off every 0.1-0.8 s;
- ``caller``: C cut from the primary (both ways or one way);
- ``slow``: every link of the primary delayed 10-60 ms +/- 20 ms, 20% reordered, 2-10% lost.

With files every replica still sees the log (one file system), so the faults are the
caller's and ``slow``. After each fault: exactly one primary, the newest claim's; when
it moved, the old one delivered nothing after the new one became primary and nothing
the new one does not hold; an old primary that stopped is started again as a standby.
At the end every call C sent was applied exactly once and in order, and every answer
came back.

    python bench/partitions.py --store raft --faults 20 [--seed S]

Needs root, ip, nft and iptables (``make install`` adds the last three). The seed is
printed first; a failure prints the command that replays the schedule (timing is not
seeded: the same faults in the same order, not the same instants).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))

from tests.partitions.net import NetError, Network, unavailable  # noqa: E402
from tests.partitions.replicas import (  # noqa: E402
    CALLER,
    RAFT,
    REPLICAS,
    PartitionCheckError,
    ReplicaSet,
)

KINDS = {"raft": ("full", "one-way-out", "one-way-in", "flap", "caller", "slow"),
         "files": ("caller", "flap", "slow")}


def schedule(store: str, faults: int, seed: int) -> list[tuple[str, float, int]]:
    """(kind, duration in s, a sub-seed) per fault, from the seed alone."""
    rng = random.Random(seed)
    return [(rng.choice(KINDS[store]), rng.uniform(0.5, 3.0), rng.randrange(1 << 16))
            for _ in range(faults)]


def _cut_primary(rs: ReplicaSet, primary: str, how: str) -> None:
    others = [n for n in (*REPLICAS, RAFT) if n != primary and n in rs.net.names]
    if how == "one-way-out":
        rs.net.cut([primary], others, one_way=True)
    elif how == "one-way-in":
        rs.net.cut(others, [primary], one_way=True)
    else:
        rs.net.cut([primary], others)


def inflict(rs: ReplicaSet, kind: str, duration: float, sub: int, primary: str) -> None:
    """Apply one fault for ``duration`` seconds, then heal it."""
    rng = random.Random(sub)
    net = rs.net
    if kind in ("full", "one-way-out", "one-way-in"):
        _cut_primary(rs, primary, kind)
        time.sleep(duration)
    elif kind == "flap":
        end = time.monotonic() + duration * 2
        while time.monotonic() < end:
            victim = rs.primaries()[0] if rs.primaries() else primary
            if rs.store == "raft":
                _cut_primary(rs, victim, rng.choice(("full", "one-way-out", "one-way-in")))
            else:
                net.cut([CALLER], [victim], one_way=rng.random() < 0.4)
            time.sleep(rng.uniform(0.1, 0.8))
            net.heal()
            time.sleep(rng.uniform(0.1, 0.8))
    elif kind == "caller":
        one_way = rng.random() < 0.5
        a, b = rng.choice(((CALLER, primary), (primary, CALLER)))
        net.cut([a], [b], one_way=one_way)
        time.sleep(duration)
    elif kind == "slow":
        links = [(CALLER, primary), (primary, CALLER)]
        if rs.store == "raft":
            links += [(primary, RAFT), (RAFT, primary)]
        for i, (a, b) in enumerate(links):
            net.shape(a, b, rng.uniform(0.01, 0.06), jitter=0.02, reorder=0.2, seed=sub + i)
            net.lose(a, b, rng.uniform(0.02, 0.10))
        time.sleep(duration)
        for a, b in links:
            net.lose(a, b, 0.0)
            net.unshape(a, b)
    else:
        raise ValueError(f"no such fault: {kind}")
    net.heal()


def run(store: str, faults: int, seed: int, workdir: Path,
        say: Any = print) -> dict[str, Any]:
    """One seeded run; returns its summary or raises PartitionCheckError."""
    plan = schedule(store, faults, seed)
    nodes = [*REPLICAS, CALLER] + ([RAFT] if store == "raft" else [])
    started = time.monotonic()
    takeovers: list[float] = []
    counts = dict.fromkeys(KINDS[store], 0)
    with Network(nodes) as net:
        rs = ReplicaSet(net, workdir, store)
        try:
            rs.start()
            rs.start_pump()
            primary = "r0"
            for i, (kind, duration, sub) in enumerate(plan, 1):
                time.sleep(0.3)
                say(f"fault {i}/{len(plan)} at {time.monotonic() - started:.1f} s: {kind} "
                    f"for {duration:.1f} s (primary {primary}, {rs.sent} calls sent)")
                inflict(rs, kind, duration, sub, primary)
                counts[kind] += 1
                now = rs.wait_one_primary()
                if now != primary:
                    margins = rs.check_handover(primary, now)
                    takeovers.append(margins["last_old_delivery_before_takeover_s"])
                    say(f"  {now} took over; {primary}'s last delivery came "
                        f"{takeovers[-1] * 1000:.0f} ms before")
                    # Fenced, the old primary rejoins as a standby in its own process
                    # and closes its binding, which starts over here with a new one.
                    rs.rebind(REPLICAS.index(primary))
                    primary = now
            rs.stop_pump()
            checked = rs.check_exactly_once(primary)
        finally:
            rs.close()
    return {"store": store, "seed": seed, "faults": faults, "kinds": counts,
            "takeovers": len(takeovers), "checked": checked,
            "min_margin_ms": min(takeovers) * 1000 if takeovers else None,
            "elapsed_s": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--store", choices=sorted(KINDS), default="raft",
                        help="where S's log lives (default raft)")
    parser.add_argument("--faults", type=int, default=20, help="F (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="default: random")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    why = unavailable()
    if why is not None:
        parser.error(why)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    workdir = Path(tempfile.mkdtemp(prefix="ambrosia-partitions-"))

    def say(text: str) -> None:
        print(f"partitions: {text}", flush=True)

    say(f"seed {seed}, store {args.store}, F={args.faults} faults")
    try:
        s = run(args.store, args.faults, seed, workdir, say)
    except (PartitionCheckError, NetError) as e:
        say(f"FAILED (seed {seed}): {e}")
        say(f"logs kept in {workdir}")
        say(f"reproduce with: python bench/partitions.py --store {args.store} "
            f"--faults {args.faults} --seed {seed}")
        return 1
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    kinds = ", ".join(f"{k} {v}" for k, v in s["kinds"].items())
    margin = (f"; an old primary's last delivery came at least {s['min_margin_ms']:.0f} ms "
              "before its successor became primary" if s["takeovers"] else "")
    say(f"OK: seed {seed}, store {args.store}, {args.faults} faults survived ({kinds}); "
        f"{s['takeovers']} takeovers; {s['checked']} calls checked: lost 0, duplicated 0, "
        f"in order; one primary after every heal{margin}; {s['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
