"""Machines on a private network, on the real kernel: one network namespace per node,
each joined by a veth pair to a bridge in a namespace of its own (the switch), so nothing
of the host's network is touched. Partitions and loss are nftables rules on the bridge
(``bridge`` family, forward hook: every packet between two nodes passes there, and a
rule there drops it silently, as a cut cable does, where a drop on the sender's output
would hand the sender an error instead). Delay, jitter and reordering are an iptables
``NFQUEUE`` rule on the sending node and a shaper process (``shaper.py``) there,
because this kernel, like many, has no ``sch_netem`` for ``tc netem``.

Everything is created with unique names and removed by ``close()`` (also after a failed
test: use it as a context manager); a process left in a namespace is killed there first.

The processes of a node run with ``prefix(node)`` before their command line
(``ip netns exec NS``); code in this process reaches a node's loopback (a coordinator's
receive and send ports) from a socket made inside ``inside(node)``, which moves only the
calling thread into the namespace for as long as it takes to create the socket.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

SUBNET = "10.200.0"  # per switch: every network has its own namespaces, so no clash
CLONE_NEWNET = 0x40000000
TABLE = "ambrosia"
TOOLS = {"ip": "iproute2", "nft": "nftables", "iptables": "iptables"}


class NetError(RuntimeError):
    """A command that builds or changes the network failed; the message is its output."""


def unavailable() -> str | None:
    """Why namespaced networks cannot be built here (one line), or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network partitions need root (ip netns, nft, iptables)"
    missing = [f"{tool} (Debian's {pkg})" for tool, pkg in TOOLS.items()
               if shutil.which(tool) is None]
    if missing:
        return f"network partitions need {', '.join(missing)}: `make install` adds them"
    probe = f"ambr-probe-{secrets.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
    except NetError as err:
        return f"cannot create a network namespace: {err}"
    with contextlib.suppress(NetError):
        _run("ip", "netns", "del", probe)
    return None


def _run(*argv: str, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise NetError(f"{' '.join(argv)}: {err}") from None
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise NetError(f"{' '.join(argv)}: {why[-1] if why else f'exit {done.returncode}'}")
    return done.stdout


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetError(f"setns: {os.strerror(err)}")


class Network:
    """Nodes ``names`` on one switch; ``close()`` removes it all.

    Args:
        names: the nodes (short words: they name namespaces and interfaces).
        shaper_python: the interpreter that runs the shaper (default: this one).
    """

    def __init__(self, names: Sequence[str], shaper_python: str = sys.executable) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError("node names must be distinct and at least one")
        self.id = secrets.token_hex(3)
        self.names = list(names)
        self.switch = f"ambr-{self.id}-sw"
        self._ns = {n: f"ambr-{self.id}-{n}" for n in names}
        self._addr = {n: f"{SUBNET}.{10 + i}" for i, n in enumerate(names)}
        self.blocked: set[tuple[str, str]] = set()
        self.lossy: dict[tuple[str, str], float] = {}
        self._shapers: dict[tuple[str, str], subprocess.Popen[str]] = {}
        self._python = shaper_python
        self._made: list[str] = []

    # ------------------------------------------------------------------ life
    def start(self) -> Network:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        _run("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        sw = ("ip", "-n", self.switch)
        _run(*sw, "link", "set", "lo", "up")
        _run(*sw, "link", "add", "br0", "type", "bridge")
        _run(*sw, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            ns = self._ns[name]
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            inner, outer = f"a{self.id}{i}", f"s{self.id}{i}"
            _run("ip", "link", "add", inner, "netns", ns, "type", "veth", "peer", "name",
                 outer, "netns", self.switch)
            _run(*sw, "link", "set", outer, "master", "br0", "up")
            node = ("ip", "-n", ns)
            _run(*node, "link", "set", "lo", "up")
            _run(*node, "addr", "add", f"{self._addr[name]}/24", "dev", inner)
            _run(*node, "link", "set", inner, "up")
        self._apply()

    def close(self) -> None:
        """Stop the shapers, kill what still runs in a node, remove every namespace."""
        for proc in self._shapers.values():
            _stop(proc)
        self._shapers.clear()
        for ns in reversed(self._made):
            with contextlib.suppress(NetError):
                for pid in _run("ip", "netns", "pids", ns).split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(NetError):
                _run("ip", "netns", "del", ns)  # its veth ends go with it
        self._made.clear()

    def __enter__(self) -> Network:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ nodes
    def address(self, node: str) -> str:
        return self._addr[node]

    def namespace(self, node: str) -> str:
        return self._ns[node]

    def prefix(self, node: str) -> list[str]:
        """Put before a command line to run it on ``node``."""
        return ["ip", "netns", "exec", self._ns[node]]

    @contextlib.contextmanager
    def inside(self, node: str) -> Iterator[None]:
        """Move this thread (only) into ``node``'s namespace for the block: sockets made
        there stay there."""
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{self._ns[node]}", os.O_RDONLY)
        try:
            _setns(there)
            try:
                yield
            finally:
                _setns(here)
        finally:
            os.close(here)
            os.close(there)

    # ------------------------------------------------------------------ faults
    def cut(self, a: Iterable[str], b: Iterable[str], *, one_way: bool = False) -> None:
        """Drop every packet from the nodes ``a`` to the nodes ``b`` (and back, unless
        ``one_way``). Cuts add up until ``heal``."""
        a, b = list(a), list(b)
        self._known(*a, *b)
        for x in a:
            for y in b:
                if x != y:
                    self.blocked.add((x, y))
                    if not one_way:
                        self.blocked.add((y, x))
        self._apply()

    def heal(self) -> None:
        """Lift every cut (loss and shaping stay)."""
        self.blocked.clear()
        self._apply()

    def set_cuts(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Exactly these directed cuts, in one atomic change of the rules."""
        pairs = set(pairs)
        self._known(*(n for p in pairs for n in p))
        self.blocked = pairs
        self._apply()

    def lose(self, src: str, dst: str, fraction: float) -> None:
        """Drop ``fraction`` of the packets from ``src`` to ``dst`` at random (0 stops)."""
        self._known(src, dst)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be within 0..1")
        if fraction:
            self.lossy[(src, dst)] = fraction
        else:
            self.lossy.pop((src, dst), None)
        self._apply()

    def shape(self, src: str, dst: str, delay: float, jitter: float = 0.0,
              reorder: float = 0.0, seed: int = 0) -> None:
        """Hold packets from ``src`` to ``dst`` ``delay`` s, +/- ``jitter``, letting a
        fraction ``reorder`` through at once (netem's ``delay D J reorder P``)."""
        self._known(src, dst)
        self.unshape(src, dst)
        queue = len(self._shapers) + 1 + 16 * self.names.index(dst)
        proc = subprocess.Popen(
            [*self.prefix(src), self._python, "-m", "tests.partitions.shaper",
             "--queue", str(queue), "--delay-ms", str(delay * 1000),
             "--jitter-ms", str(jitter * 1000), "--reorder", str(reorder), "--seed", str(seed)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=_shaper_env())
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("shaping queue"):
            _stop(proc)
            err = proc.stderr.read().strip() if proc.stderr else ""
            raise NetError(f"the shaper on {src} did not start: {err or line.strip()}")
        self._shapers[(src, dst)] = proc
        proc.queue = queue  # type: ignore[attr-defined]
        # Bypass: should the shaper die, packets pass instead of vanishing.
        _run(*self.prefix(src), "iptables", "-A", "OUTPUT", "-d", self._addr[dst], "-j",
             "NFQUEUE", "--queue-num", str(queue), "--queue-bypass")

    def unshape(self, src: str, dst: str) -> None:
        proc = self._shapers.pop((src, dst), None)
        if proc is None:
            return
        queue = str(proc.queue)  # type: ignore[attr-defined]
        with contextlib.suppress(NetError):
            _run(*self.prefix(src), "iptables", "-D", "OUTPUT", "-d", self._addr[dst], "-j",
                 "NFQUEUE", "--queue-num", queue, "--queue-bypass")
        _stop(proc)

    def _known(self, *nodes: str) -> None:
        unknown = sorted(set(nodes) - set(self.names))
        if unknown:
            raise ValueError(f"no such node: {', '.join(unknown)}")

    def rules(self) -> str:
        """The switch's ruleset for the current cuts and loss (nft syntax)."""
        lines = [f"table bridge {TABLE}", f"flush table bridge {TABLE}",
                 f"table bridge {TABLE} {{", "  chain filter {",
                 "    type filter hook forward priority 0; policy accept;"]
        for src, dst in sorted(self.blocked):
            lines.append(f"    ip saddr {self._addr[src]} ip daddr {self._addr[dst]} drop")
        for (src, dst), fraction in sorted(self.lossy.items()):
            lines.append(f"    ip saddr {self._addr[src]} ip daddr {self._addr[dst]} "
                         f"numgen random mod 1000000 < {round(fraction * 1e6)} drop")
        lines += ["  }", "}", ""]
        return "\n".join(lines)

    def _apply(self) -> None:
        _run("ip", "netns", "exec", self.switch, "nft", "-f", "-", stdin=self.rules())

    def wait_ready(self, node: str, port: int, limit: float = 30.0) -> None:
        """Wait until something on ``node`` listens on ``port`` (from its /proc)."""
        deadline = time.monotonic() + limit
        want = f":{port:04X} "
        while time.monotonic() < deadline:
            out = _run(*self.prefix(node), "cat", "/proc/net/tcp")
            if any(want in line and line.split()[3] == "0A" for line in out.splitlines()[1:]):
                return
            time.sleep(0.05)
        raise NetError(f"nothing listens on port {port} of {node} after {limit:g} s")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def _shaper_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
