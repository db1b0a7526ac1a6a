"""The CPU a command costs to start, for two source trees in turns (the machine is noisy,
so each round runs every case once in each tree): ``ambrosia --help``, a real
``register-instance`` into a fresh AMBROSIA_HOME, ``python -m ambrosia_ic --help``, and
``ambrosia ic`` up to its readiness line (CPU and wall time; stopped by SIGTERM after).

    python bench/startup_cpu.py OLD_TREE NEW_TREE [--rounds N]

Each tree is a checkout whose compiled extensions are built; it is put first on
PYTHONPATH (the tree, its ic-harness and services). CPU is user + system seconds of the
process, as ``/usr/bin/time -f %U+%S`` reports it. Prints the median and range per case.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIME = "/usr/bin/time"


def _env(tree: Path, home: Path) -> dict[str, str]:
    path = os.pathsep.join(str(tree / p) for p in ("", "ic-harness", "services"))
    return dict(os.environ, PYTHONPATH=path, AMBROSIA_HOME=str(home))


def _cpu(args: list[str], env: dict[str, str]) -> float:
    with tempfile.NamedTemporaryFile("r") as out:
        subprocess.run([TIME, "-o", out.name, "-f", "%U %S", *args], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        user, system = out.read().split()[-2:]
    return float(user) + float(system)


def _ports() -> list[int]:
    socks = [socket.socket() for _ in range(3)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _register(tree: Path, home: Path) -> tuple[float, dict[str, str]]:
    env = _env(tree, home)
    rp, sp, ip = _ports()
    cpu = _cpu([sys.executable, "-m", "ambrosia_cli", "register-instance", "-i", "svc",
                "-rp", str(rp), "-sp", str(sp), "-p", str(ip), "-l", str(home / "logs")], env)
    return cpu, env


def _ic_ready(env: dict[str, str]) -> tuple[float, float]:
    """``ambrosia ic`` up to its readiness line: its CPU then, and the wall time."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ambrosia_ic", "ic", "-i", "svc"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("ambrosia-ic ready:"):
            break
    else:
        raise SystemExit("the coordinator ended before it was ready")
    wall = time.monotonic() - started
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    return cpu, wall


def _round(tree: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        got = {"ambrosia --help": _cpu([sys.executable, "-m", "ambrosia_cli", "--help"],
                                       _env(tree, home)),
               "python -m ambrosia_ic --help": _cpu(
                   [sys.executable, "-m", "ambrosia_ic", "--help"], _env(tree, home))}
        got["ambrosia register-instance"], env = _register(tree, home)
        got["ambrosia ic: CPU to ready"], got["ambrosia ic: wall s to ready"] = _ic_ready(env)
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    runs: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for _ in range(args.rounds):
        for which in ("old", "new"):
            for case, value in _round(getattr(args, which)).items():
                runs[which].setdefault(case, []).append(value)
    bare = statistics.median(_cpu([sys.executable, "-c", "pass"], dict(os.environ))
                             for _ in range(args.rounds))
    print(f"bare interpreter: {bare:.3f} s CPU (median of {args.rounds})")
    print(f"{'case':32} {'old median (range)':>22} {'new median (range)':>22}")
    for case in runs["old"]:
        cells = []
        for which in ("old", "new"):
            v = runs[which][case]
            cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
        print(f"{case:32} {cells[0]:>22} {cells[1]:>22}")


if __name__ == "__main__":
    main()
