"""An active/active replica set through power cuts: the three replicas of ``S`` (their
coordinators, and the raw test bindings in this process) and the caller ``C`` on one
machine whose disk loses power. Everything of theirs is on that disk: the registry, the
shared log directory with its epochs (the leases), seals, checkpoints and the
checkpointer's lock, and C's own log. The replica set is the partition harness's
(``tests.partitions.replicas.ReplicaSet``) on one host, with its checks.

C is on the same machine, so a cut takes it down with S: its numbered calls are inputs
of its own log, and "acknowledged" means its binding was handed the call back, durable.
A caller that kept power would resend whatever S's log lost (S tells it where its log
ends), and so would C after a cut: a loss in S is therefore checked before C starts
again, from what S's new primary recovered from its files alone.

A cut (``power_cut``) kills every coordinator at once, drops what was not synced, mounts
the disk again and starts S's replicas in a random order (so any of them may come back
as the checkpointer, a standby or the primary), then C. What is checked:

- S's new primary, when made primary, holds every call any replica had applied before
  the cut (the coordinators hand a binding only what is durable), in order;
- C holds every call and every answer its binding had seen before the cut, in order, and
  goes on from what it holds (the calls after it were never acknowledged);
- after each restart: exactly one primary, the one the newest claim names;
- at the end: C sent ``C:0..n-1``; the primary applied exactly those, in order, and C
  holds every answer; every other replica followed the same calls;
- the time-travel replay (``debug-instance``) of each instance from its oldest kept
  checkpoint rebuilds the same state.

Two cuts land at a takeover, the moment picked from the new primary's log line: one
before its new log's first record, one after its first records (``cut_at_takeover``).

    python -m tests.power.leases --cuts P --kills K [--seed S]
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ambrosia_ic import api, registry
from ambrosia_ic.lease import current_epoch

from ambrosia_core.ports import free_ports
from tests.ic.rawbinding import CounterApp, Driver, RawBinding
from tests.partitions.replicas import (
    CALLER,
    PORTS,
    REPLICAS,
    OneHost,
    PartitionCheckError,
    ReplicaSet,
    wait_for,
)

from .disk import PowerDisk

__all__ = ["PoweredReplicaSet", "TAKEN_OVER"]

# What a standby's coordinator logs once it holds its epoch, has sealed the old log
# and created its own, before it takes any input: the moment of the takeover cut.
TAKEN_OVER = re.compile(r"primary of epoch (\d+), writing log (\d+)")
TAKEOVER_CUTS = ("cut at a takeover", "cut after a takeover's first records")


class PoweredReplicaSet(ReplicaSet[OneHost]):
    """S's replicas and C on the power disk ``disk``; their stderr in ``tmp``."""

    def __init__(self, disk: PowerDisk, tmp: Path, seed: int) -> None:
        super().__init__(OneHost(), tmp, "files", files=disk.mount,
                         ports=free_ports(len(PORTS)))
        self.disk = disk
        self.rng = random.Random(seed)
        self.reports: list[list[str]] = []
        self.takeovers = 0

    # ------------------------------------------------------------------ faults
    def kill_primary(self) -> str:
        """``kill -9`` of the primary's coordinator; a standby takes over and the dead
        one comes back as a standby. Returns the new primary."""
        old = self.wait_one_primary()
        _kill9(self.procs[old])
        self.drivers[old].b.close()
        new = self.wait_new_primary(old)
        self.start_replica(REPLICAS.index(old))
        self.takeovers += 1
        return new

    def power_cut(self) -> list[str]:
        """Every process of the machine dies at once and the unsynced is dropped; all
        restart. Returns what the cut dropped."""
        self.stop_pump()
        c = self.client.snapshot()
        # What the bindings were given is durable: the coordinators deliver only that.
        applied = max((self.drivers[n].snapshot()["received"] for n in REPLICAS
                       if n in self.drivers), key=len)
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)  # a stopped process dies too
        for proc in self.procs.values():
            proc.wait(30)
        for d in self.drivers.values():
            d.b.close()
            d.thread.join(30)
        report = self.disk.restart()
        self.reports.append(report)
        order = list(range(len(REPLICAS)))
        self.rng.shuffle(order)
        for n in order:
            self.start_replica(n)
        # S recovers from its own files alone: C starts after S's primary is chosen.
        primary = self.wait_one_primary()
        d = self.drivers[primary]
        recovered: list[str] = wait_for(
            lambda: None if (r := d.applied_when_primary()) is None else (r,),
            f"{primary}'s binding made primary")[0]
        if recovered[:len(applied)] != applied:
            raise PartitionCheckError(
                f"S's replicas had applied {len(applied)} calls before the cut; {primary} "
                f"recovered {len(recovered)} and took over with them, not starting with "
                f"those\n{self.dropped()}")
        self._start_ic("C", 0, CALLER)
        client = self._drive("C", 0, CALLER, CounterApp("C", "S"))
        wait_for(client.primary.is_set, "C recovering after the cut")
        after = client.snapshot()
        for what, held in (("calls", "sent"), ("answers", "acked")):
            if after[held][:len(c[held])] != c[held]:
                raise PartitionCheckError(
                    f"C's binding had seen {len(c[held])} {what} before the cut; after it "
                    f"C holds {len(after[held])}, not starting with those\n{self.dropped()}")
        self.sent = len(after["sent"])  # the rest were never acknowledged: sent again
        self.wait_one_primary()
        self.start_pump()
        return report

    def cut_at_takeover(self, first_records: bool = False) -> tuple[str, int, int]:
        """A cut at a standby's takeover, the moment picked from its coordinator's log
        line (it holds the epoch, has sealed the old log and created its own).

        Without ``first_records`` C is paused first (nothing reaches S), so the cut lands
        between the claim and the new log's first record. With it, C goes on and the cut
        lands once the new primary has applied a few of C's calls, written to its new
        log; the checkpointer is paused (a slow one), so that nothing else syncs the log
        directory meanwhile. Returns the new primary, its epoch and its log number."""
        self.stop_pump()
        old = self.wait_one_primary()
        if first_records:
            checkpointer = next((n for n in REPLICAS if n != old and self.live(n)
                                 and "as the checkpointer" in self._logged(n)), None)
            if checkpointer is None:
                raise PartitionCheckError(f"no live checkpointer\n{self.tails()}")
            os.kill(self.procs[checkpointer].pid, signal.SIGSTOP)
            self.start_pump()
        else:
            self.check_exactly_once(old)  # nothing left in flight
            os.kill(self.procs[CALLER].pid, signal.SIGSTOP)
        logged = {n: self._logged(n) for n in REPLICAS}
        _kill9(self.procs[old])

        def taken() -> tuple[str, int, int] | None:
            for n in REPLICAS:
                if n != old and (m := TAKEN_OVER.search(self._logged(n)[len(logged[n]):])):
                    return n, int(m.group(1)), int(m.group(2))
            return None

        new, epoch, log = wait_for(taken, "a standby taking over")
        self.takeovers += 1
        d = self.drivers[new]
        at = wait_for(lambda: None if (r := d.applied_when_primary()) is None else (r,),
                      f"{new}'s binding made primary")[0]
        if first_records:
            wait_for(lambda: len(d.snapshot()["received"]) >= len(at) + 5,
                     f"{new} applying C's calls in its new log")
        elif len(d.records) != d.marks["becoming-primary"]:
            raise PartitionCheckError(f"{new} delivered records after it took over, with "
                                      "its caller paused: the cut would not be in the window")
        self.power_cut()
        return new, epoch, log

    def exercise(self, cuts: int, kills: int, takeover_cuts: bool,
                 say: Any = print) -> dict[str, Any]:
        """While C streams: ``cuts`` power cuts and ``kills`` kills of the primary in a
        random order at random moments, and (``takeover_cuts``) the two cuts at a
        takeover among them; then every check. Returns the counts."""
        faults = ["power cut"] * cuts + ["kill -9 of the primary"] * kills
        self.rng.shuffle(faults)
        if takeover_cuts:
            for fault in TAKEOVER_CUTS:
                faults.insert(self.rng.randrange(len(faults) + 1), fault)
        started = time.monotonic()
        for i, fault in enumerate(faults, 1):
            time.sleep(self.rng.uniform(0.2, 1.2))
            say(f"fault {i}/{len(faults)} at {time.monotonic() - started:.1f} s: {fault} "
                f"(C has sent {self.sent})")
            if fault == "power cut":
                say(f"  dropped {len(self.power_cut())} unsynced change(s)")
            elif fault in TAKEOVER_CUTS:
                new, epoch, log = self.cut_at_takeover(first_records=fault == TAKEOVER_CUTS[1])
                say(f"  {new} held epoch {epoch} and had created log {log}; dropped "
                    f"{len(self.reports[-1])} unsynced change(s)")
            else:
                say(f"  {self.kill_primary()} took over")
        time.sleep(self.rng.uniform(0.2, 1.2))
        self.stop_pump()
        primary = self.wait_one_primary()
        try:
            self.check_exactly_once(primary)
        except PartitionCheckError as e:
            raise PartitionCheckError(f"{e}\n{self.dropped()}") from None
        calls = [f"C:{k}" for k in range(self.sent)]
        self.check_followers(calls)
        self.stop_all()
        server, client = self.replay("S"), self.replay("C")
        if server["received"] != calls or client["sent"] != calls or client["acked"] != calls:
            raise PartitionCheckError(
                f"the replays disagree with the run's {len(calls)} calls: S applied "
                f"{len(server['received'])}, C sent {len(client['sent'])} and holds "
                f"{len(client['acked'])} answers\n{self.dropped()}")
        return {**self.summary(), "primary": primary,
                "elapsed_s": time.monotonic() - started}

    # ------------------------------------------------------------------ checks
    def check_followers(self, calls: list[str]) -> None:
        """Every live replica that is not primary followed the same calls."""
        for n in REPLICAS:
            if self.live(n) and not self.drivers[n].primary.is_set():
                wait_for(lambda n=n: self.drivers[n].snapshot()["received"] == calls,
                         f"{n} following every call")

    def replay(self, name: str, home: Path | None = None) -> dict[str, list[str]]:
        """The time-travel replay of ``name`` from its oldest kept checkpoint (every
        process of the machine stopped): the state the replayed binding ends with."""
        kept = api.kept_checkpoints(name, self.home)
        if not kept:
            raise PartitionCheckError(f"{name} kept no checkpoint to replay from")
        rp, sp = free_ports(2)
        err = self._stderr(f"replay-{name}")
        proc = api.start_debug_instance(name, kept[0], receive_port=rp, send_port=sp,
                                        idle_timeout=1.0, home=self.home, stderr=err)
        binding = RawBinding(rp, sp)
        d = Driver(binding, CounterApp(name, "S" if name == "C" else "")).start()
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            binding.close()
            _kill9(proc)
        summary = next((json.loads(line) for line in out.splitlines()
                        if line.startswith("{")), None)
        if summary is None or summary["status"] not in ("ok", "unchecked"):
            raise PartitionCheckError(f"the replay of {name} from checkpoint {kept[0]} "
                                      f"failed: {summary}\n{self.tails()}")
        d.thread.join(30)
        if d.error is not None:
            raise PartitionCheckError(f"the replay of {name}: {d.error!r}")
        return d.snapshot()

    def stop_all(self) -> None:
        """Stop every process (the disk keeps power): the files as they are now."""
        self.stop_pump()
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            _kill9(proc)
        for d in self.drivers.values():
            d.b.close()

    def dropped(self) -> str:
        """What each cut dropped: the file or entry, and the fsync that would keep it."""
        return "\n".join(f"cut {i}: {line}" for i, report in enumerate(self.reports, 1)
                         for line in report)

    def _logged(self, node: str) -> str:
        try:
            return self.stderr_paths[node][-1].read_text(errors="replace")
        except (KeyError, OSError):
            return ""

    def summary(self) -> dict[str, Any]:
        d = registry.instance_dir(registry.load("S", self.home))
        return {"cuts": len(self.reports), "takeovers": self.takeovers, "calls": self.sent,
                "epochs": current_epoch(d), "dropped": sum(map(len, self.reports))}


def _kill9(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    """A longer seeded run: ``python -m tests.power.leases --cuts P --kills K [--seed S]``."""
    import argparse
    import tempfile

    from .disk import unavailable

    parser = argparse.ArgumentParser(prog="python -m tests.power.leases",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=10, metavar="P",
                        help="power cuts at random moments (default 10)")
    parser.add_argument("--kills", type=int, default=3, metavar="K",
                        help="kill -9s of the primary among them (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="default: random")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    why = unavailable()
    if why is not None:
        parser.error(why)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    workdir = Path(tempfile.mkdtemp(prefix="ambrosia-power-leases-"))

    def say(text: str) -> None:
        print(f"power leases: {text}", flush=True)

    say(f"seed {seed}, P={args.cuts} power cuts and two at a takeover, K={args.kills} "
        f"kills of the primary")
    disk = PowerDisk(workdir / "power")
    disk.start()
    rs = PoweredReplicaSet(disk, workdir, seed)
    ok = False
    try:
        rs.start()
        rs.start_pump()
        s = rs.exercise(args.cuts, args.kills, True, say=say)
        ok = True
    except AssertionError as e:
        say(f"FAILED (seed {seed}): {e}")
        say(f"logs kept in {workdir}")
        return 1
    finally:
        rs.close()
        disk.stop()
        if ok and not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    say(f"OK: seed {seed}: {s['cuts']} power cuts, {s['takeovers']} takeovers by a kill or "
        f"at a cut, {s['epochs']} epochs claimed, {s['calls']} "
        f"calls applied exactly once and in order by {s['primary']}, every answer held, "
        f"one primary after every restart, both replays agree; {s['dropped']} unsynced "
        f"changes dropped; {s['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
