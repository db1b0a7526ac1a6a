"""Crash injection: numbered requests from one immortal to another while bindings and
coordinators of either side are killed with ``kill -9``.

A client immortal sends requests 1..N to a server immortal, awaiting each reply; the
server appends each request to its state (checkpointed every few requests), forks a
``tally`` of it to itself (a fork, as a long replay is mostly made of), and replies.
Each instance runs as two processes, so either half can die on its own: its coordinator
(``ambrosia ic``) and its binding (``ambrosia run ... --receive-port --send-port``).
A driver, seeded, waits until the server has applied a random request number, then kills
one of the four processes; the other half of that instance fails with it (they fail
together), both are restarted, and the run goes on. K kills later it waits for the client
to finish, stops everything and checks, by replaying each instance's kept checkpoint and
log with ``debug-instance``, that the server applied 1..N exactly once and in order and
that the client holds every reply, and that the server tallied 1..N exactly once and in
order too.

    python bench/chaos.py --requests 2000 --kills 20 [--seed S] [--victims server-binding,...]
        [--power-cuts P]

With ``--power-cuts P`` the instances' files (registry, logs, checkpoints) live on a disk
that can lose power (``tests/power``: a FUSE file system that keeps what was not synced
apart): P times, at seeded points among the kills, every process is killed and everything
not yet fsynced, file data and directory entries alike, is dropped; then the disk and all
four processes start again. A failure names what the cuts before it dropped, with the
fsync that would have kept each.

The seed is printed first; a failure prints the command that reproduces the schedule.
(Process timing is not seeded, so a reproduction replays the same kill points and victims,
not the same instants.)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))

from ambrosia_core.processes import stop_process  # noqa: E402
from ambrosia_py import Immortal, fork, rpc  # noqa: E402

SERVER = "chaos-server"
CLIENT = "chaos-client"
APPLIED = "chaos server applied "
TALLIED = "chaos server tallied "
DONE = "chaos client done "
VICTIMS = ("server binding", "server coordinator", "client binding", "client coordinator")
POWER = "power"  # a power cut of the machine: every process, and what was not synced


class ChaosServer(Immortal):
    """Appends every request it is asked to apply; a duplicate or a gap shows in ``applied``."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.tallied: list[int] = []

    @rpc
    async def apply(self, n: int) -> list[int]:
        self.applied.append(n)
        self.self_proxy.tally(n)
        if not self.ctx.is_replaying:
            self.ctx.log.info("%s%d", APPLIED, n)
            every = int(os.environ.get("CHAOS_CHECKPOINT_EVERY", "0"))
            if every and n % every == 0:
                self.ctx.request_checkpoint()
        return [n, len(self.applied)]

    @fork
    def tally(self, n: int) -> None:
        self.tallied.append(n)
        if not self.ctx.is_replaying:
            self.ctx.log.info("%s%d", TALLIED, n)

    def on_become_primary(self) -> None:
        # Tallies handled only in replay logged nothing (replayed lines are quiet).
        if self.tallied:
            self.ctx.log.info("%s%d", TALLIED, self.tallied[-1])


class ChaosClient(Immortal):
    """Sends 1..N one after another, awaiting each reply; keeps every reply."""

    def __init__(self) -> None:
        self.requests = int(os.environ.get("CHAOS_REQUESTS", "100"))
        self.replies: list[list[int]] = []
        self.done = False

    async def on_first_start(self) -> None:
        server = self.immortal(SERVER, ChaosServer)
        for n in range(1, self.requests + 1):
            self.replies.append(list(await server.apply(n)))
        self.done = True
        self.ctx.log.info("%s%d replies", DONE, len(self.replies))

    def on_become_primary(self) -> None:
        # A life that finished only in replay logged nothing (replayed lines are quiet).
        if self.done:
            self.ctx.log.info("%s%d replies", DONE, len(self.replies))


# ---------------------------------------------------------------------------- the driver
class ChaosError(AssertionError):
    """The run broke exactly-once, ordering or liveness; the message says how."""



class _Proc:
    """A child process, its stderr kept in a file (and, for bindings, parsed line by line)."""

    def __init__(self, proc: subprocess.Popen[str], logfile: Path,
                 on_line: Callable[[str], None] | None = None, out: Any = None) -> None:
        self.proc = proc
        self.logfile = logfile
        self._out = out
        self._on_line = on_line
        self._reader: threading.Thread | None = None
        if proc.stderr is not None:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with open(self.logfile, "w") as out:
            for line in self.proc.stderr:
                out.write(line)
                if self._on_line is not None:
                    self._on_line(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.wait(30)

    def wait(self, timeout: float) -> bool:
        """Wait for the exit (and the end of its output); False if still running."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        if self._reader is not None:
            self._reader.join(10)
        for f in (self.proc.stdout, self.proc.stderr, self._out):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        return True

    def stop(self, timeout: float = 20.0) -> None:
        stop_process(self.proc, timeout, group=False)
        self.wait(0)  # its output read, its files closed


class _Instance:
    """One immortal as two processes, its coordinator and its binding, restarted together."""

    def __init__(self, run: ChaosRun, name: str, target: str) -> None:
        self.run = run
        self.name = name
        self.target = target
        self.lives = 0
        self.coordinator: _Proc | None = None
        self.binding: _Proc | None = None
        self.primary = threading.Event()  # this life's binding became primary

    def start(self) -> None:
        from ambrosia_ic import launch, registry

        from ambrosia_core.errors import CoordinatorError

        self.lives += 1
        run = self.run
        reg = registry.load(self.name, run.home)
        deadline = time.monotonic() + 60
        attempt = 0
        while True:  # a dead life's coordinator may still hold the log lock for a moment
            attempt += 1
            path = run.workdir / f"{self.name}-ic-{self.lives}.{attempt}.err"
            err = open(path, "w")  # noqa: SIM115 - closed with the process
            try:
                proc = launch.start_coordinator(self.name, env=run.env, stderr=err)
                break
            except CoordinatorError:
                err.close()
                if time.monotonic() > deadline:
                    raise ChaosError(f"the coordinator of {self.name} did not start:\n"
                                       + _tail(path)) from None
                time.sleep(0.2)
        self.coordinator = _Proc(proc, path, out=err)
        binding = subprocess.Popen(
            [sys.executable, "-m", "ambrosia_cli", "run", self.target, "-i", self.name,
             "--receive-port", str(reg.receive_port), "--send-port", str(reg.send_port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=run.env, cwd=HERE, text=True)
        connected = threading.Event()
        self.primary = threading.Event()

        def on_line(line: str) -> None:
            if "connected to the coordinator" in line:
                connected.set()
            elif "became primary" in line:
                self.primary.set()
            run.on_line(line)

        self.binding = _Proc(binding, run.workdir / f"{self.name}-binding-{self.lives}.err",
                             on_line)
        # Kills may land during recovery, but not before the binding has connected: a
        # coordinator killed earlier leaves the binding retrying its connection for a while.
        if not connected.wait(60):
            raise ChaosError(f"the binding of {self.name} did not connect:\n{self.tails()}")

    def processes(self) -> list[_Proc]:
        return [p for p in (self.coordinator, self.binding) if p is not None]

    def kill_all(self) -> None:
        """Both halves at once, as a power cut does."""
        for p in self.processes():
            if p.proc.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for p in self.processes():
            p.wait(30)

    def kill(self, half: str) -> None:
        victim = self.binding if half == "binding" else self.coordinator
        assert victim is not None
        victim.kill9()

    def reap(self, limit: float = 20.0) -> None:
        """Wait for the surviving half to notice and exit; kill it if it does not."""
        t0 = time.monotonic()
        for p in self.processes():
            if not p.wait(limit):
                self.run.say(f"  {self.name}: pid {p.pid} was still running {limit:.0f} s "
                             "after its partner died; killing it")
                p.kill9()
        took = time.monotonic() - t0
        if took > 5:
            self.run.say(f"  {self.name}: the surviving half took {took:.1f} s to exit")

    def stop(self) -> None:
        if self.binding is not None:
            self.binding.stop()
        if self.coordinator is not None:
            self.coordinator.stop()

    def tails(self) -> str:
        return "\n".join(f"--- {p.logfile.name}\n{_tail(p.logfile)}" for p in self.processes())


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return "(no output)"


class ChaosRun:
    """One seeded run. ``execute()`` returns a summary dict or raises ``ChaosError``.

    Args:
        requests: N, the numbered requests the client sends.
        kills: K, the ``kill -9``s.
        seed: seeds the kill points and victims.
        victims: the processes that may be killed (default: all four ``VICTIMS``).
        workdir: AMBROSIA_HOME, logs and every process's stderr go here.
        checkpoint_every: the server asks for a checkpoint after every this many requests
            (0: only the checkpoints each start takes).
        stall: fail when the server applies nothing new for this many seconds.
        power_cuts: P, the power cuts (needs ``disk``).
        disk: a ``tests.power.disk.PowerDisk``, started: the instances' home lives on it.
    """

    def __init__(self, requests: int, kills: int, seed: int, workdir: Path, *,
                 checkpoint_every: int | None = None, stall: float = 90.0,
                 victims: tuple[str, ...] = VICTIMS,
                 say: Callable[[str], None] = print, power_cuts: int = 0,
                 disk: Any = None) -> None:
        if requests < 2 or kills < 0 or power_cuts < 0:
            raise ValueError("need at least 2 requests and non-negative kill and cut counts")
        if power_cuts and disk is None:
            raise ValueError("power cuts need a disk that can lose power")
        if not victims or set(victims) - set(VICTIMS):
            raise ValueError(f"victims must be some of {', '.join(VICTIMS)}")
        self.victims = victims
        self.requests = requests
        self.kills = kills
        self.seed = seed
        self.workdir = workdir
        self.power_cuts = power_cuts
        self.disk = disk
        self.home = (disk.mount if disk is not None else workdir) / "home"
        self.stall = stall
        self.say = say
        every = max(10, requests // 10) if checkpoint_every is None else checkpoint_every
        self.checkpoint_every = every
        self.env = dict(os.environ, AMBROSIA_HOME=str(self.home), PYTHONUNBUFFERED="1",
                        CHAOS_REQUESTS=str(requests), CHAOS_CHECKPOINT_EVERY=str(every))
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.progress = 0
        self.dropped: list[tuple[int, list[str]]] = []
        self.verbose_cuts = False
        self.tallied = 0
        self.done = False
        self.checkpoints = 0
        self._cond = threading.Condition()
        self.server = _Instance(self, SERVER, "chaos:ChaosServer")
        self.client = _Instance(self, CLIENT, "chaos:ChaosClient")

    def reproduce(self) -> str:
        victims = ",".join(v.replace(" ", "-") for v in self.victims)
        cuts = f" --power-cuts {self.power_cuts}" if self.power_cuts else ""
        return (f"python bench/chaos.py --requests {self.requests} --kills {self.kills} "
                f"--seed {self.seed} --checkpoint-every {self.checkpoint_every} "
                f"--victims {victims}{cuts}")

    def on_line(self, line: str) -> None:
        at = line.find(APPLIED)
        if at >= 0:
            n = int(line[at + len(APPLIED):].split()[0])
            with self._cond:
                if n > self.progress:
                    self.progress = n
                    self._cond.notify_all()
        elif TALLIED in line:
            n = int(line[line.find(TALLIED) + len(TALLIED):].split()[0])
            with self._cond:
                if n > self.tallied:
                    self.tallied = n
                    self._cond.notify_all()
        elif DONE in line:
            with self._cond:
                self.done = True
                self._cond.notify_all()
        elif "checkpoint of " in line and f"ambrosia.{SERVER}" in line:
            with self._cond:
                self.checkpoints += 1

    def _wait(self, what: str, reached: Callable[[], bool]) -> None:
        with self._cond:
            seen, since = self.progress, time.monotonic()
            while not reached():
                if self.progress != seen:
                    seen, since = self.progress, time.monotonic()
                if time.monotonic() - since > self.stall:
                    raise ChaosError(
                        f"no progress for {self.stall:.0f} s waiting for {what} (the server "
                        f"had applied {self.progress})\n{self.server.tails()}\n"
                        f"{self.client.tails()}")
                self._cond.wait(0.5)

    def _register(self) -> None:
        from ambrosia_ic import registry

        from ambrosia_core.ports import free_ports

        for name in (SERVER, CLIENT):
            rp, sp, icp = free_ports(3)
            registry.register(instance_name=name, receive_port=rp, send_port=sp, ic_port=icp,
                              log_dir=str(self.home / "logs"), home=self.home)

    def schedule(self) -> list[tuple[int, str, float]]:
        """(server progress to wait for, victim, extra delay in s) per kill, from the seed."""
        rng = random.Random(self.seed)
        points = sorted(rng.randrange(1, self.requests) for _ in range(self.kills))
        plan = [(p, rng.choice(self.victims), rng.uniform(0.0, 0.05)) for p in points]
        # Power cuts are drawn after the kills: a seed's kills stay what they were.
        plan += [(rng.randrange(1, self.requests), POWER, rng.uniform(0.0, 0.05))
                 for _ in range(self.power_cuts)]
        return sorted(plan, key=lambda step: step[0])

    def execute(self) -> dict[str, Any]:
        schedule = self.schedule()
        started = time.monotonic()
        killed = dict.fromkeys((*VICTIMS, POWER), 0)
        self._register()
        try:
            self.server.start()
            self.client.start()
            for i, (point, victim, delay) in enumerate(schedule, 1):
                self._wait(f"request {point}", lambda p=point: self.progress >= p)
                time.sleep(delay)
                if victim == POWER:
                    self._power_cut(i, len(schedule), started)
                    killed[POWER] += 1
                    continue
                side, half = victim.split()
                inst = self.server if side == "server" else self.client
                self.say(f"kill {i}/{len(schedule)} at {time.monotonic() - started:.1f} s: "
                         f"kill -9 the {victim} (server at request {self.progress})")
                inst.kill(half)
                killed[victim] += 1
                inst.reap()
                inst.start()
            self._wait("the client to finish", lambda: self.done)
            self._wait("the server's last tally", lambda: self.tallied >= self.requests)
        finally:
            self.client.stop()
            self.server.stop()
        elapsed = time.monotonic() - started
        try:
            self._verify()
        except ChaosError as e:
            if self.dropped:
                raise ChaosError(f"{e}\n{self.dropped_text()}") from None
            raise
        return {"seed": self.seed, "requests": self.requests, "kills": self.kills,
                "killed": killed, "server_lives": self.server.lives,
                "client_lives": self.client.lives, "checkpoints": self.checkpoints,
                "elapsed_s": elapsed}

    def _power_cut(self, i: int, steps: int, started: float) -> None:
        self.say(f"kill {i}/{steps} at {time.monotonic() - started:.1f} s: power cut "
                 f"(server at request {self.progress})")
        self.client.kill_all()
        self.server.kill_all()
        report = self.disk.restart()
        self.dropped.append((i, report))
        self.say(f"  the cut dropped {len(report)} unsynced change(s)")
        if self.verbose_cuts:
            for line in report:
                self.say(f"    {line}")
        self.server.start()
        self.client.start()
        # Recovery after a cut rewrites the replay digests the cut dropped (they are not
        # synced: see ambrosia_ic.logstore.digest); a stop in the middle of it would leave
        # the time-travel check a digest shorter than the log.
        for inst in (self.server, self.client):
            if not inst.primary.wait(60):
                raise ChaosError(f"{inst.name} did not become primary after a power cut:\n"
                                 f"{inst.tails()}")

    def dropped_text(self) -> str:
        """What each power cut dropped: the file or entry, and the fsync that keeps it."""
        lines = []
        for i, report in self.dropped:
            lines.append(f"power cut at step {i} dropped {len(report) or 'nothing'}"
                         + (":" if report else ""))
            lines += [f"  {line}" for line in report]
        return "\n".join(lines)

    def _verify(self) -> None:
        """Replay each instance's kept checkpoint and log; check the states."""
        import chaos as app

        from ambrosia_py.testing import repro

        server = repro(SERVER, app.ChaosServer, home=self.home).state
        client = repro(CLIENT, app.ChaosClient, home=self.home).state
        problems = check_states(self.requests, server.applied, client.replies, client.done,
                                server.tallied)
        if problems:
            raise ChaosError("; ".join(problems))


def check_states(n: int, applied: list[int], replies: list[list[int]], done: bool,
                 tallied: list[int] | None = None) -> list[str]:
    """What is wrong with the final states of a run of ``n`` requests (nothing: [])."""
    problems = []
    for what, got in (("applied", applied), ("tallied", tallied)):
        if got is None or got == list(range(1, n + 1)):
            continue
        dups = len(got) - len(set(got))
        bad = next((i for i, x in enumerate(got) if x != i + 1), len(got))
        problems.append(f"the server {what} {len(got)} requests ({dups} duplicates), "
                        f"first wrong at index {bad}: {got[max(0, bad - 3):bad + 3]}")
    if not done:
        problems.append("the client has not finished")
    want = [[i, i] for i in range(1, n + 1)]
    if replies != want:
        bad = next((i for i, (a, b) in enumerate(zip(replies, want, strict=False)) if a != b),
                   min(len(replies), n))
        problems.append(f"the client holds {len(replies)} replies, first wrong at index "
                        f"{bad}: {replies[bad:bad + 3]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--requests", type=int, default=2000, help="N (default 2000)")
    parser.add_argument("--kills", type=int, default=20, help="K (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="default: random")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="server checkpoint interval in requests (default N/10)")
    parser.add_argument("--victims", default=",".join(v.replace(" ", "-") for v in VICTIMS),
                        help="the processes that may be killed, comma-separated (default: "
                             "all four)")
    parser.add_argument("--power-cuts", type=int, default=0, metavar="P",
                        help="P power cuts of the machine among the kills (default 0; "
                             "needs FUSE: Debian's fuse3 and root)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    workdir = Path(tempfile.mkdtemp(prefix="ambrosia-chaos-"))

    def say(text: str) -> None:
        print(f"chaos: {text}", flush=True)

    victims = tuple(v.strip().replace("-", " ") for v in args.victims.split(","))
    if set(victims) - set(VICTIMS):
        parser.error(f"--victims: choose from {', '.join(v.replace(' ', '-') for v in VICTIMS)}")
    disk = None
    if args.power_cuts:
        from tests.power.disk import PowerDisk, unavailable

        why = unavailable()
        if why is not None:
            parser.error(f"--power-cuts: {why}")
        disk = PowerDisk(workdir / "power")
        disk.start()
    run = ChaosRun(args.requests, args.kills, seed, workdir,
                   checkpoint_every=args.checkpoint_every, victims=victims, say=say,
                   power_cuts=args.power_cuts, disk=disk)
    say(f"seed {seed}, N={args.requests} requests, K={args.kills} kills of {args.victims}, "
        f"P={args.power_cuts} power cuts, checkpoint every {run.checkpoint_every} requests")
    ok = False
    try:
        summary = run.execute()
        ok = True
    except ChaosError as e:
        say(f"FAILED (seed {seed}, N={args.requests}, K={args.kills}): {e}")
        say(f"logs kept in {workdir}")
        say(f"reproduce with: {run.reproduce()}")
        return 1
    finally:
        if disk is not None:
            disk.stop()
        if ok and not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    kinds = ", ".join(f"{v} {k}" for k, v in summary["killed"].items())
    say(f"OK: seed {seed}, N={args.requests}, K={args.kills}, P={args.power_cuts} ({kinds}); "
        f"{args.requests} requests applied exactly once and in order, the client holds all "
        f"{args.requests} replies; {run.checkpoints} "
        f"server checkpoints sent; {summary['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
