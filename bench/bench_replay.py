"""Recovery: replay speed and recovery time as the log grows from 10^3 to 10^6 records,
and recovery once a checkpoint has been taken.

An immortal (``Tally``) does a real first start through its own coordinator and forks one
``tick`` to itself, which is logged as a data record. The coordinator is stopped and that
record is appended again and again (new sequence ids, same body and input watermarks,
written with the coordinator's own record encoder) until the log holds N records, as if
the instance had run that long without a checkpoint. Then the coordinator and the binding
(``ambrosia run``) are started and timed until the binding reports the recovery complete;
the replayed state must count N - 1 ticks.

- recovery time, N records: from starting both processes to "recovery complete",
  beside the time the wire decoder alone takes to read the same records from the file.
  Process start-up is included; it is measured separately as the recovery of a
  two-record log.
- replay speed, N records: records / (recovery time - start-up time), beside the
  decoder's records per second; reported only when the replay takes at least 0.1 s
  beyond start-up (below that it is start-up's noise divided into N).
- recovery after a checkpoint: a recovery ends with a becoming-primary checkpoint, after
  which older logs are deleted; a second recovery of the same N-record history replays
  nothing. Its time is shown beside the first recovery's: periodic checkpoints keep
  recovery flat however long the history.

Quick mode stops at 10^5 records; full mode goes to 10^6. To measure some sizes alone
(the 10^6 row takes a while in full mode)::

    python bench/bench_replay.py --sizes 1000000 [--no-binding]
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ambrosia_py import Immortal, fork

HERE = Path(__file__).resolve().parent
NAME = "bench-tally"
_MEASURABLE_S = 0.1  # replay time beyond start-up below which no speed is reported
TALLY = "bench tally "


class Tally(Immortal):
    def __init__(self) -> None:
        self.count = 0

    def on_first_start(self) -> None:
        self.self_proxy.tick(1)

    @fork
    def tick(self, by: int) -> None:
        self.count += by

    def on_recovery_complete(self, messages_replayed: int) -> None:
        self.ctx.log.info("%s%d after %d messages", TALLY, self.count, messages_replayed)

    def on_become_primary(self) -> None:
        self.ctx.log.info("%s%d", TALLY, self.count)


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, AMBROSIA_HOME=str(home), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p)
    return env


def _life(home: Path) -> tuple[float, int, int]:
    """Start coordinator and binding; (seconds to recovery complete, records replayed,
    tally after recovery)."""
    from bench_throughput import _Pair

    t0 = time.perf_counter()
    pair = _Pair(NAME, "bench_replay:Tally", home, _env(home))
    try:
        line = pair.wait_for("recovery complete", 900)
        elapsed = time.perf_counter() - t0
        replayed = int(re.search(r"recovery complete: (\d+)", line).group(1))  # type: ignore[union-attr]
        tally = pair.wait_for(f"{TALLY}", 60)
        count = int(tally.split(TALLY, 1)[1].split()[0])
        pair.wait_for("became primary", 60)
    finally:
        pair.stop()
    return elapsed, replayed, count


def _first_start(home: Path) -> None:
    from ambrosia_ic import registry
    from bench_throughput import _Pair

    from ambrosia_core.ports import free_ports

    rp, sp, icp = free_ports(3)
    registry.register(instance_name=NAME, receive_port=rp, send_port=sp, ic_port=icp,
                      log_dir=str(home / "logs"), home=home)
    pair = _Pair(NAME, "bench_replay:Tally", home, _env(home))
    try:
        pair.wait_for("became primary", 60)
        # The tick is logged once the first start's records are durable: wait for the file.
        deadline = time.monotonic() + 60
        while _records(home) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the first start did not log its tick")
            time.sleep(0.05)
    finally:
        pair.stop()


def _log_file(home: Path) -> Path:
    from ambrosia_ic import logstore, registry

    d = registry.instance_dir(registry.load(NAME, home))
    return logstore.log_path(d, logstore.file_numbers(d, logstore.LOG_PREFIX)[-1])


def _records(home: Path) -> int:
    from ambrosia_ic import logstore

    try:
        return len(logstore.scan_log(_log_file(home))[0])
    except Exception:  # the coordinator may not have created or finished it yet
        return 0


def grow(home: Path, total: int) -> Path:
    """Append copies of the tick record until the newest log holds ``total`` records."""
    from ambrosia_ic import logstore, registry

    reg = registry.load(NAME, home)
    log = _log_file(home)
    records, scan = logstore.scan_log(log)
    tick = records[-1]
    body, inputs = tick.body, tick.inputs
    seq = tick.seq_id + 1
    os.truncate(log, scan.good_end)  # a coordinator that was killed leaves zeros past it
    with open(log, "ab") as f:
        buf = bytearray()
        for _ in range(total - len(records)):
            buf += logstore.encode_disk_record(reg.committer_id, seq, body, inputs)[0]
            seq += 1
            if len(buf) > 1 << 22:
                f.write(buf)
                buf.clear()
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    return log


def decode_rate(log: Path) -> tuple[float, int]:
    """(seconds, records) for the wire decoder to read the log's records."""
    from ambrosia_ic import logstore

    from ambrosia_core.wire import LogRecordDecoder

    records, _ = logstore.scan_log(log)
    wire = b"".join(r.wire for r in records)
    t0 = time.perf_counter()
    dec = LogRecordDecoder()
    dec.receive_data(wire)
    n = sum(1 for _ in dec.events())
    return time.perf_counter() - t0, n


def binding_stream(n: int) -> tuple[bytes, bytes]:
    """What a coordinator sends a recovering ``Tally`` binding: a checkpoint, ``n`` logged
    ticks (one per record, as a fork to itself logs them) and BecomingPrimary; and the
    tick records alone."""
    from ambrosia_core.wire import (
        BecomingPrimary,
        encode_checkpoint_record,
        encode_control_record,
        encode_record,
    )
    from ambrosia_py.testing.inmemory import InMemoryCoordinator

    c = InMemoryCoordinator(Tally, NAME)
    c.first_start()
    state = c.take_checkpoint()
    tick = c.log[-1]
    records = b"".join(encode_record(1, seq, tick) for seq in range(c.seq, c.seq + n))
    return (encode_checkpoint_record(1, len(state)) + state + records
            + encode_control_record(1, BecomingPrimary()), records)


def binding_replay_rate(stream: bytes, n: int) -> float:
    """Records per second for a binding's engine (no sockets, no coordinator) to replay
    ``stream`` fed 1 MiB at a time, as the runner feeds it."""
    from ambrosia_py.runtime.engine import Engine, SendCheckpoint

    engine = Engine(Tally, NAME)
    engine.attach(None, lambda: None)
    t0 = time.perf_counter()
    for i in range(0, len(stream), 1 << 20):
        engine.receive_data(stream[i : i + (1 << 20)])
        while (out := engine.next_output()) is not None:
            if isinstance(out, SendCheckpoint):
                for _ in out.chunks(1 << 20):
                    pass
    elapsed = time.perf_counter() - t0
    count = engine.instance.count  # type: ignore[union-attr]
    if count != n + 1 or engine.conn.messages_replayed != n:
        raise RuntimeError(f"in-process replay of {n} ticks counted {count}")
    return n / elapsed


def ceiling_rate(records: bytes, n: int) -> float:
    """``ceilings.replay_rate`` over the tick records, calling a method like ``tick``."""
    import ceilings

    tally = Tally()
    rate, calls = ceilings.replay_rate(records, tally.tick)
    if calls != n or tally.count != n:
        raise RuntimeError(f"the replay ceiling made {calls} calls for {n} records")
    return rate


def binding_rows(quick: bool) -> list[dict[str, Any]]:
    """The binding's replay alone, beside the replay loop ceiling, interleaved."""
    n = 10**5 if quick else 10**6
    stream, records = binding_stream(n)
    rates, ceils, ratios = [], [], []
    for _ in range(3):
        c = ceiling_rate(records, n)
        r = binding_replay_rate(stream, n)
        rates.append(r)
        ceils.append(c)
        ratios.append(r / c)
    label = f"10^{len(str(n)) - 1}"
    return [{"name": f"binding replay in-process, {label} records (vs the replay loop "
                     "ceiling: frame, XXH64, msgpack, call)",
             "value": statistics.median(rates), "unit": "records/s",
             "baseline": statistics.median(ceils), "ratio": statistics.median(ratios),
             "spread": _spread(ratios), "extra": {"records": n, "quick": quick}}]


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def run(quick: bool, sizes: list[int] | None = None, binding: bool = True
        ) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    if sizes is None:
        sizes = [10**3, 10**4, 10**5] if quick else [10**3, 10**4, 10**5, 10**6]
    rows: list[dict[str, Any]] = binding_rows(quick) if binding else []
    ceiling: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        home0 = Path(tmp) / "startup"
        _first_start(home0)
        startup_runs = [_life(home0)[0] for _ in range(2 if quick else 3)]
        startup = statistics.median(startup_runs)
        rows.append({"name": "recovery of a 2-record log (start-up; vs nothing)",
                     "value": startup, "unit": "s", "baseline": None, "ratio": None,
                     "spread": _spread(startup_runs), "extra": {}})
        for n in sizes:
            home = Path(tmp) / f"n{n}"
            _first_start(home)
            log = grow(home, n)
            dec_s, dec_n = decode_rate(log)
            from ambrosia_ic import logstore

            ticks = b"".join(r.wire for r in logstore.scan_log(log)[0][1:])
            ceiling[n] = ceiling_rate(ticks, n - 1)
            log_bytes = log.stat().st_size  # the recovery's checkpoint removes this log
            if dec_n != n:
                raise RuntimeError(f"the decoder read {dec_n} of {n} records")
            elapsed, replayed, count = _life(home)
            if replayed != n or count != n - 1:
                raise RuntimeError(f"{n} records: replayed {replayed}, tally {count}")
            again, replayed2, count2 = _life(home)
            if replayed2 != 0 or count2 != n - 1:
                raise RuntimeError(f"{n} records, after the checkpoint: replayed "
                                   f"{replayed2}, tally {count2}")
            label = f"10^{len(str(n)) - 1}"
            extra = {"records": n, "log_bytes": log_bytes, "quick": quick,
                     "startup_s": startup}
            rows.append(
                {"name": f"recovery time, {label} records (vs decoding them)", "value": elapsed,
                 "unit": "s", "baseline": dec_s, "ratio": elapsed / dec_s, "spread": 0.0,
                 "extra": extra})
            if elapsed - startup >= _MEASURABLE_S:
                rate = n / (elapsed - startup)
                rows += [
                    {"name": f"replay speed, {label} records (vs decoding them)", "value": rate,
                     "unit": "records/s", "baseline": dec_n / dec_s,
                     "ratio": rate * dec_s / dec_n, "spread": 0.0, "extra": extra},
                    {"name": f"replay speed, {label} records (vs the replay loop ceiling)",
                     "value": rate, "unit": "records/s", "baseline": ceiling[n],
                     "ratio": rate / ceiling[n], "spread": 0.0, "extra": extra},
                ]
            rows += [
                {"name": f"recovery after a checkpoint, {label} records of history "
                         "(vs the first recovery)", "value": again, "unit": "s",
                 "baseline": elapsed, "ratio": again / elapsed, "spread": 0.0, "extra": extra},
            ]
    return rows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="recovery and replay at chosen log sizes")
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[10**6], help="records per log, comma-separated")
    parser.add_argument("--quick", action="store_true",
                        help="fewer start-up runs; the binding row at 10^5 records")
    parser.add_argument("--no-binding", action="store_true",
                        help="leave out the binding's in-process replay row")
    args = parser.parse_args()
    for row in run(args.quick, args.sizes, not args.no_binding):
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}"
        base = "-" if row["baseline"] is None else f"{row['baseline']:,.3f}"
        print(f"{row['name']}: {row['value']:,.3f} {row['unit']} (baseline {base}, "
              f"ratio {ratio})")


if __name__ == "__main__":
    main()
