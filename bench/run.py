"""Run the benchmarks, print a table and write bench/results.json.

Each benchmark is a module in this directory named ``bench_<name>.py`` that exposes
``run(quick: bool) -> list[dict]``; each dict holds

    name      what was measured
    value     the median over repeats
    unit      e.g. "frames/s"
    baseline  the median of the baseline run alongside it, in the same unit (or None)
    ratio     value / baseline (or None); > 1 is faster than the baseline for rates
    spread    (max - min) / median over the repeats, a rough noise figure

Usage: ``python bench/run.py [--quick] [--only NAME ...] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REQUIRED = ("name", "value", "unit", "baseline", "ratio", "spread")


def discover() -> list[str]:
    """Benchmark names, from the ``bench_*.py`` files beside this one."""
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def run_one(name: str, quick: bool) -> list[dict[str, Any]]:
    module = importlib.import_module(f"bench_{name}")
    results = module.run(quick)
    for r in results:
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise ValueError(f"bench_{name}: result {r.get('name')!r} lacks {missing}")
        r["benchmark"] = name
    return results


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def table(results: list[dict[str, Any]]) -> str:
    rows = [("benchmark", "name", "median", "unit", "baseline", "ratio", "spread")]
    for r in results:
        rows.append((
            r["benchmark"], r["name"], _fmt(r["value"]), r["unit"], _fmt(r["baseline"]),
            "-" if r["ratio"] is None else f"{r['ratio']:.3f}",
            f"{100 * r['spread']:.1f}%",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 or i == 3 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    available = discover()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller inputs")
    parser.add_argument("--only", nargs="+", choices=available, metavar="NAME",
                        help=f"run only these ({', '.join(available)})")
    parser.add_argument("--out", type=Path, default=HERE / "results.json")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    sys.path.insert(1, str(HERE.parent))
    results: list[dict[str, Any]] = []
    for name in args.only or available:
        started = time.perf_counter()
        results.extend(run_one(name, args.quick))
        print(f"[{name}: {time.perf_counter() - started:.1f} s]", file=sys.stderr)
    print(table(results))
    report = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "quick": args.quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
