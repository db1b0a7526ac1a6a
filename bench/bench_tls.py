"""What TLS costs on a link between two coordinators: the await round trip and durable fork
RPCs of ``bench_throughput``'s two immortals, once with the coordinators' link over TLS
(mutual certificates from ``ambrosia tls init``'s code, ECDSA P-256) and once over plain
TCP, alternating in the same run; the plain run is the baseline, so a ratio above 1 is
TLS's cost on latency, below 1 its cost on throughput.

Only the link between the coordinators changes: each binding still reaches its own
coordinator on 127.0.0.1, as it always does.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run(quick: bool) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    import bench_throughput as bt

    from ambrosia_cli.tls import init_dir

    forks, burst, pings, repeats = (3000, 300, 300, 1) if quick else (20000, 500, 2000, 3)
    figures: dict[str, dict[str, list[float]]] = {
        kind: {"rate": [], "p50": [], "p99": []} for kind in ("plain", "tls")}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        pki = Path(tmp)
        init_dir(pki, ["127.0.0.1"])
        tls = ["--tls-cert", str(pki / "127.0.0.1.pem"), "--tls-key",
               str(pki / "127.0.0.1-key.pem"), "--tls-ca", str(pki / "ca.pem")]
        for _ in range(repeats):
            for kind, options in (("plain", []), ("tls", tls)):
                r = bt.run_immortals(forks, burst, pings, options)
                figures[kind]["rate"].append(r["forks"] / r["elapsed_s"])
                figures[kind]["p50"].append(bt.percentile(r["latencies_ns"], 0.5) / 1e3)
                figures[kind]["p99"].append(bt.percentile(r["latencies_ns"], 0.99) / 1e3)
    sizes = {"forks": forks, "burst": burst, "pings": pings, "repeats": repeats,
             "payload_bytes": bt.PAYLOAD, "quick": quick}
    on, off = figures["tls"], figures["plain"]
    return [
        bt.bench_row("durable fork RPCs, coordinator link over TLS (vs plain TCP)", on["rate"],
                "RPC/s", off["rate"], sizes),
        bt.bench_row("await round trip p50, coordinator link over TLS (vs plain TCP)", on["p50"],
                "us", off["p50"], sizes),
        bt.bench_row("await round trip p99, coordinator link over TLS (vs plain TCP)", on["p99"],
                "us", off["p99"], sizes),
    ]


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
