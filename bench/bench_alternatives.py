"""What a Python user would pick instead, on the same workload.

The workload (see ``alt_workload``): a durable counter incremented by numbered requests,
exactly once; a sequential client sends request ``i`` = "add ``i``" with ``i`` as its request
id and waits for each reply.  Contenders:

* ``tcp``      raw TCP loopback request/response with the same 16-byte messages, in-memory
               de-duplication; the floor for a request/response round trip.
* ``grpc``     gRPC unary calls (``grpcio``, generic handler, no protoc), in-memory
               de-duplication; the non-durable reference.
* ``dbos``     DBOS durable workflows in its default SQLite: one workflow per request, the
               request id as workflow id, the counter updated by a DBOS datasource transaction.
               DBOS is a library, so its client runs in the same process (no network hop).
* ``ambrosia`` a client immortal sending numbered async/await requests to a server immortal,
               each with its own coordinator (``alt_ambrosia_app``): see :func:`run_ambrosia`.

Servers run in their own process on 127.0.0.1, started afresh for every repetition; every
run checks every reply, retries a few ids, and checks the final state.  Repetitions are
interleaved across contenders so that machine noise hits all of them alike.  Every figure
carries a ratio against a baseline measured in the same run: gRPC against raw TCP, DBOS
against gRPC, AMBROSIA against DBOS; raw TCP is its own baseline (ratio 1).  ``baseline`` is
the baseline's median value, ``extra["baseline_name"]`` names it, and ``extra`` also holds
the ratio against every other contender measured (``ratio_vs_<name>``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import alt_workload as wl  # noqa: E402

SERVERS = _HERE / "alt_servers.py"
SERVER_START_TIMEOUT_S = 60.0
PREFIX = "alternatives"
_INSTALL = "pip install -e '.[bench]'"


class ContenderUnavailableError(RuntimeError):
    """The contender cannot run here (a missing package, or a framework not built yet)."""


@dataclass(frozen=True)
class Sizes:
    reps: int
    fast_requests: int  # raw TCP and gRPC
    fast_warmup: int
    durable_requests: int  # DBOS and AMBROSIA: each request waits for a disk flush
    durable_warmup: int


QUICK = Sizes(reps=3, fast_requests=300, fast_warmup=30, durable_requests=30, durable_warmup=5)
FULL = Sizes(reps=5, fast_requests=3000, fast_warmup=200, durable_requests=200, durable_warmup=20)


# ------------------------------------------------------------------------------ processes


@contextlib.contextmanager
def _server(mode: str) -> Iterator[int]:
    """Start ``alt_servers.py <mode>`` and yield its port; stop it on exit."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"{mode} server did not start (said {line!r})")
        yield int(line.split()[1])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# ------------------------------------------------------------------------------ contenders


def run_tcp(requests: int, warmup: int) -> wl.RunResult:
    import socket

    with _server("tcp") as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb", buffering=0)

        def roundtrip(request_id: int, amount: int) -> tuple[int, int]:
            sock.sendall(wl.encode(request_id, amount))
            buf = b""
            while len(buf) < wl.MESSAGE_SIZE:
                chunk = reader.read(wl.MESSAGE_SIZE - len(buf))
                if not chunk:
                    raise wl.WorkloadError("tcp: server closed the connection")
                buf += chunk
            return wl.decode(buf)

        return wl.run_workload(
            "tcp", roundtrip, lambda: roundtrip(wl.STATE_QUERY_ID, 0), requests, warmup
        )


def run_grpc(requests: int, warmup: int) -> wl.RunResult:
    # gRPC core logs connection teardown (GOAWAY) at INFO; keep the bench table readable.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        import grpc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ContenderUnavailableError(f"grpcio is not installed ({_INSTALL})") from exc
    from alt_servers import GRPC_ADD

    with _server("grpc") as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=SERVER_START_TIMEOUT_S)
        add = channel.unary_unary(GRPC_ADD)  # no serializers: bytes in, bytes out

        def unary(request_id: int, amount: int) -> tuple[int, int]:
            return wl.decode(add(wl.encode(request_id, amount)))

        return wl.run_workload(
            "grpc", unary, lambda: unary(wl.STATE_QUERY_ID, 0), requests, warmup
        )


def run_dbos(requests: int, warmup: int) -> wl.RunResult:
    """Run the DBOS workload in a fresh process with its SQLite files in a temp directory.

    A fresh process per run keeps DBOS's process-wide singleton and registry out of the
    caller, and makes every run start from empty databases.
    """
    try:
        import dbos  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ContenderUnavailableError(f"dbos is not installed ({_INSTALL})") from exc
    with tempfile.TemporaryDirectory(prefix="bench-dbos-") as state_dir:
        done = subprocess.run(
            [sys.executable, str(SERVERS), "dbos", state_dir, str(requests), str(warmup)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if done.returncode != 0:
        raise wl.WorkloadError(f"dbos run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise wl.WorkloadError(f"dbos run printed no result:\n{done.stdout[-2000:]}")
    return wl.RunResult.from_json(json.loads(lines[-1]))


def run_ambrosia(requests: int, warmup: int) -> wl.RunResult:
    """The AMBROSIA side of the same workload: the third contender.

    A server immortal holds the counter (with the same reply table keyed by request id) and
    a client immortal sends request ``i`` as ``await server.add(i, i)``; each runs under
    ``ambrosia run`` with its own coordinator, logging to a fresh temporary AMBROSIA_HOME on
    127.0.0.1 (see ``alt_ambrosia_app``).  The client performs the same checks as
    :func:`alt_workload.run_workload` and logs its timings, which are parsed here.
    """
    try:
        from ambrosia_py.testing import start_immortal
    except ImportError as exc:  # pragma: no cover - depends on the checkout
        raise ContenderUnavailableError(f"the AMBROSIA framework is not usable: {exc}") from exc
    import alt_ambrosia_app as app

    with tempfile.TemporaryDirectory(prefix="bench-ambrosia-") as home:
        env = dict(
            os.environ,
            ALT_REQUESTS=str(requests),
            ALT_WARMUP=str(warmup),
            ALT_SERVER=app.SERVER,
        )
        procs = []
        try:
            procs.append(
                start_immortal(
                    "alt_ambrosia_app:CounterServer", app.SERVER, home=home, cwd=_HERE, env=env
                )
            )
            client = start_immortal(
                "alt_ambrosia_app:CounterClient", "alt-counter-client", home=home, cwd=_HERE,
                env=env,
            )
            procs.append(client)
            line = client.wait_for(app.RESULT_TAG, timeout=600)
        finally:
            for p in reversed(procs):
                p.stop()
    data = json.loads(line.split(app.RESULT_TAG, 1)[1])
    if data.pop("errors"):
        raise wl.WorkloadError(f"ambrosia: {data}")
    return wl.RunResult.from_json(data)


@dataclass(frozen=True)
class Contender:
    name: str
    label: str
    run: Callable[[int, int], wl.RunResult]
    durable: bool
    baseline: str | None  # contender whose figures this one's ratios are taken against


CONTENDERS: tuple[Contender, ...] = (
    Contender("tcp", "raw TCP loopback (in-memory dedup)", run_tcp, False, None),
    Contender("grpc", "gRPC unary (in-memory dedup)", run_grpc, False, "tcp"),
    Contender("dbos", "DBOS workflows, SQLite", run_dbos, True, "grpc"),
    Contender("ambrosia", "AMBROSIA immortals", run_ambrosia, True, "dbos"),
)


# ------------------------------------------------------------------------------ reporting


def _metrics(result: wl.RunResult) -> dict[str, float]:
    return {
        "requests_per_s": result.requests_per_s,
        "p50_latency_us": result.latency_us(50),
        "p99_latency_us": result.latency_us(99),
    }


UNITS = {"requests_per_s": "req/s", "p50_latency_us": "us", "p99_latency_us": "us"}


def measure(
    quick: bool, only: tuple[str, ...] | None = None, log: Callable[[str], None] | None = None
) -> dict[str, list[wl.RunResult]]:
    """Run every available contender ``reps`` times, interleaved; checked results by name."""
    sizes = QUICK if quick else FULL
    chosen = [c for c in CONTENDERS if only is None or c.name in only]
    results: dict[str, list[wl.RunResult]] = {c.name: [] for c in chosen}
    unavailable: set[str] = set()
    for _ in range(sizes.reps):
        for c in chosen:
            if c.name in unavailable:
                continue
            n, w = (
                (sizes.durable_requests, sizes.durable_warmup)
                if c.durable
                else (sizes.fast_requests, sizes.fast_warmup)
            )
            try:
                results[c.name].append(c.run(n, w))
            except ContenderUnavailableError as exc:
                unavailable.add(c.name)
                if log is not None:
                    log(f"{PREFIX}: skipping {c.name}: {exc}")
    return {name: runs for name, runs in results.items() if runs}


def _paired_ratio(values: list[float], baselines: list[float]) -> float | None:
    pairs = [v / b for v, b in zip(values, baselines, strict=False) if b]
    return wl.median(pairs) if pairs else None


def figures(results: dict[str, list[wl.RunResult]]) -> list[dict[str, Any]]:
    """Turn checked runs into the harness's figure dicts (median over reps, with ratios)."""
    per_rep: dict[str, dict[str, list[float]]] = {}
    medians: dict[str, dict[str, float]] = {}
    for name, runs in results.items():
        per_rep[name] = {m: [_metrics(r)[m] for r in runs] for m in UNITS}
        medians[name] = {m: wl.median(vs) for m, vs in per_rep[name].items()}

    out: list[dict[str, Any]] = []
    for c in CONTENDERS:
        if c.name not in medians:
            continue
        # Ratio against the declared baseline; if that one did not run, the next one down.
        base = c.baseline
        while base is not None and base not in medians:
            base = next(x.baseline for x in CONTENDERS if x.name == base)
        runs = results[c.name]
        for metric, unit in UNITS.items():
            value = medians[c.name][metric]
            ratios = {
                f"ratio_vs_{other}": value / medians[other][metric]
                for other in medians
                if other != c.name and medians[other][metric]
            }
            out.append(
                {
                    "name": f"{PREFIX}.{c.name}.{metric}",
                    "value": value,
                    "unit": unit,
                    # The harness wants the baseline's value; its name goes in extra.
                    "baseline": medians[base][metric] if base else value,
                    "ratio": ratios[f"ratio_vs_{base}"] if base else 1.0,
                    "spread": wl.spread(per_rep[c.name][metric]),
                    "extra": {
                        "contender": c.label,
                        "baseline_name": f"{PREFIX}.{base or c.name}.{metric}",
                        "durable": c.durable,
                        "requests_per_run": runs[0].requests,
                        "runs": len(runs),
                        "per_run": per_rep[c.name][metric],
                        "exactly_once_checked": True,
                        # Each repetition's ratio to the baseline's run of the same
                        # repetition (run back to back), less exposed to slow drifts.
                        "paired_ratio_median": _paired_ratio(
                            per_rep[c.name][metric], per_rep[base or c.name][metric]
                        ),
                        **ratios,
                    },
                }
            )
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    """Entry point for the bench harness."""
    return figures(measure(quick, log=lambda msg: print(msg, file=sys.stderr)))


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'figure':<44} {'median':>12} {'unit':<6} {'spread':>7} {'ratio':>8}  baseline"]
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(
            f"{r['name']:<44} {r['value']:>12.1f} {r['unit']:<6} {r['spread']:>7.1%} "
            f"{ratio:>8}  {r['extra']['baseline_name']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the figure dicts as JSON")
    args = parser.parse_args()
    rows = run(args.quick)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
