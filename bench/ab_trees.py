"""Two checkouts of the project, the same workload, interleaved: bench_throughput's four
processes (forks in bursts, then awaited calls) run from checkout A, then B, then B, then
A, and so on, so load from other work on the machine falls on both alike.

    python bench/ab_trees.py BASE_DIR NEW_DIR [--forks 20000] [--burst 500] [--pings 1000]
                             [--pairs 4] [--env-b NAME=VALUE ...]

Prints each run and, per checkout, the medians of forks/s, the await round trip p50 and
p99, and the CPU seconds the two coordinators and the two bindings used (from /proc, read
just before they are stopped): CPU is steadier than rates on a busy machine. ``--env-b``
sets variables for B's runs only (the same checkout twice, e.g. AMBROSIA_IC_PREALLOC=0,
compares a setting).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# Run inside each checkout: its bench_throughput, its coordinator and binding.
_CHILD = """
import json, os, sys
sys.path.insert(0, "bench")
import bench_throughput as b
cpu = {}

def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

stop = b._Pair.stop

def stop_and_count(pair):
    cpu[id(pair)] = (cpu_seconds(pair.coordinator.pid), cpu_seconds(pair.binding.pid))
    stop(pair)

b._Pair.stop = stop_and_count
r = b.run_immortals(FORKS, BURST, PINGS)
lat = sorted(r["latencies_ns"])
print("AB", json.dumps([r["forks"] / r["elapsed_s"], lat[len(lat) // 2] / 1e3,
                        lat[int(len(lat) * 0.99)] / 1e3, sum(c for c, _ in cpu.values()),
                        sum(x for _, x in cpu.values())]))
"""
FIELDS = ("forks/s", "p50 us", "p99 us", "coordinators cpu s", "bindings cpu s")


def one_run(tree: str, forks: int, burst: int, pings: int,
            extra_env: dict[str, str]) -> list[float] | None:
    code = (_CHILD.replace("FORKS", str(forks)).replace("BURST", str(burst))
            .replace("PINGS", str(pings)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [tree, os.path.join(tree, "ic-harness"), *extra_env.pop("PYTHONPATH", "").split(
            os.pathsep)]).rstrip(os.pathsep), **extra_env)
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=900)
    lines = [x for x in out.stdout.splitlines() if x.startswith("AB ")]
    if not lines:
        print(f"run in {tree} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    values: list[float] = json.loads(lines[0][3:])
    return values


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--forks", type=int, default=20000)
    p.add_argument("--burst", type=int, default=500)
    p.add_argument("--pings", type=int, default=1000)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE")
    args = p.parse_args()
    env_b = dict(kv.split("=", 1) for kv in args.env_b)
    results: dict[str, list[list[float]]] = {"A": [], "B": []}
    for i in range(args.pairs):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        for which in order:
            tree = args.a if which == "A" else args.b
            got = one_run(tree, args.forks, args.burst, args.pings,
                          dict(env_b) if which == "B" else {})
            if got is not None:
                results[which].append(got)
                print(which, "  ".join(f"{n} {v:,.2f}" for n, v in zip(FIELDS, got, strict=True)),
                      flush=True)
    if not results["A"] or not results["B"]:
        return 1
    med = {k: [statistics.median(r[j] for r in v) for j in range(len(FIELDS))]
           for k, v in results.items()}
    for k in ("A", "B"):
        print(f"median {k}", "  ".join(f"{n} {v:,.2f}" for n, v in zip(FIELDS, med[k],
                                                                      strict=True)))
    print("B / A     ", "  ".join(f"{n} {b / a:.2f}" for n, a, b in zip(FIELDS, med["A"],
                                                                        med["B"], strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
