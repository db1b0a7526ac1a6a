"""A link shaper for kernels without ``sch_netem``: delay, jitter and reordering of the
packets an iptables ``NFQUEUE`` rule hands to user space, as ``tc qdisc ... netem delay D
J reorder P`` makes them.

Many kernels (this project's test machines among them) are built without the netem queue
discipline, and nftables' own ``queue`` expression may be missing too; the xtables
``NFQUEUE`` target and the netlink queue are nearly always there. Each queued packet is
held for ``D`` ms plus or minus up to ``J`` ms and then accepted, except that a fraction
``P`` is accepted at once: those overtake the ones held before them, which is what
netem's ``reorder`` does. Loss needs no user space (``numgen random`` drops in the
kernel, see ``net.py``).

The netlink queue protocol (``nfnetlink_queue``) is spoken directly over an
``AF_NETLINK`` socket, so nothing needs to be built: bind the queue, ask for metadata
only, read each packet's id, send a verdict by id (verdicts may come in any order).

    python -m tests.partitions.shaper --queue N --delay-ms D [--jitter-ms J]
        [--reorder P] [--seed S]

Runs in the network namespace whose iptables rule queues the packets (``ip netns exec``),
prints ``shaping queue N`` once bound, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_ACCEPT = 1
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_ERROR = 2
NLMSG_HDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
NFGENMSG = struct.Struct("=BBH")  # family, version, resource id (big-endian, packed below)
NLATTR = struct.Struct("=HH")


class ShaperError(RuntimeError):
    """The netlink queue refused us (no such queue support, or the queue is taken)."""


def _attr(kind: int, payload: bytes) -> bytes:
    raw = NLATTR.pack(NLATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _message(kind: int, queue: int, attrs: bytes, seq: int, flags: int = 0) -> bytes:
    body = NFGENMSG.pack(socket.AF_UNSPEC, 0, 0)[:2] + struct.pack(">H", queue) + attrs
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind,
                          NLM_F_REQUEST | flags, seq, 0) + body


def _attrs(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    at = 0
    while at + NLATTR.size <= len(data):
        length, kind = NLATTR.unpack_from(data, at)
        if length < NLATTR.size:
            break
        out[kind & 0x7FFF] = data[at + NLATTR.size : at + length]
        at += (length + 3) & ~3
    return out


class Shaper:
    """Holds each queued packet for its drawn delay, then accepts it.

    Args:
        queue: the NFQUEUE number the iptables rule names.
        delay: mean hold in seconds; ``jitter`` the most it varies either way.
        reorder: the fraction of packets accepted at once (they overtake held ones).
        seed: seeds the draws.
    """

    def __init__(self, queue: int, delay: float, jitter: float = 0.0, reorder: float = 0.0,
                 seed: int = 0) -> None:
        if delay < 0 or jitter < 0 or not 0.0 <= reorder <= 1.0:
            raise ValueError("delay and jitter must be >= 0 and reorder within 0..1")
        self.queue = queue
        self.delay = delay
        self.jitter = jitter
        self.reorder = reorder
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.bind((0, 0))
        self._seq = 0
        self.held: list[tuple[float, int, int]] = []  # (release time, arrival, packet id)
        self.passed = 0
        self.overtaking = 0

    def bind(self) -> None:
        """Bind the queue, metadata only; raises ShaperError with the kernel's reason."""
        self._request(NFQNL_MSG_CONFIG,
                      _attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND,
                                                      socket.AF_INET)))
        self._request(NFQNL_MSG_CONFIG,
                      _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META)))

    def _request(self, kind: int, attrs: bytes) -> None:
        self._seq += 1
        self.sock.send(_message(kind, self.queue, attrs, self._seq, NLM_F_ACK))
        while True:
            data = self.sock.recv(1 << 16)
            at = 0
            while at + NLMSG_HDR.size <= len(data):
                length, mtype, _, seq, _ = NLMSG_HDR.unpack_from(data, at)
                if mtype == NLMSG_ERROR and seq == self._seq:
                    (err,) = struct.unpack_from("=i", data, at + NLMSG_HDR.size)
                    if err:
                        raise ShaperError(f"the netlink queue {self.queue} refused the "
                                          f"shaper: {os.strerror(-err)}")
                    return
                at += max(length, NLMSG_HDR.size)

    def _verdict(self, packet_id: int) -> None:
        self._seq += 1
        self.sock.send(_message(NFQNL_MSG_VERDICT, self.queue,
                                _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT,
                                                                    packet_id)), self._seq))
        self.passed += 1

    def _hold(self, packet_id: int, now: float) -> None:
        if self.reorder and self.rng.random() < self.reorder:
            if self.held:
                self.overtaking += 1
            self._verdict(packet_id)
            return
        hold = max(0.0, self.delay + self.rng.uniform(-self.jitter, self.jitter))
        heapq.heappush(self.held, (now + hold, self.passed + len(self.held), packet_id))

    def _read(self) -> None:
        data = self.sock.recv(1 << 20)
        now = time.monotonic()
        at = 0
        while at + NLMSG_HDR.size <= len(data):
            length, mtype, _, _, _ = NLMSG_HDR.unpack_from(data, at)
            if mtype == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                body = data[at + NLMSG_HDR.size + NFGENMSG.size : at + length]
                header = _attrs(body).get(NFQA_PACKET_HDR)
                if header is not None:
                    self._hold(struct.unpack_from(">I", header)[0], now)
            at += max((length + 3) & ~3, NLMSG_HDR.size)

    def run(self, stop: list[bool]) -> None:
        """Until ``stop[0]``: read packets, release each when its time comes."""
        while not stop[0]:
            wait = 0.2
            if self.held:
                wait = max(0.0, min(wait, self.held[0][0] - time.monotonic()))
            try:
                ready, _, _ = select.select([self.sock], [], [], wait)
            except InterruptedError:
                continue
            if ready:
                self._read()
            now = time.monotonic()
            while self.held and self.held[0][0] <= now:
                self._verdict(heapq.heappop(self.held)[2])
        while self.held:  # let what is held go rather than strand it
            self._verdict(heapq.heappop(self.held)[2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--queue", type=int, required=True, help="the NFQUEUE number")
    parser.add_argument("--delay-ms", type=float, required=True, help="mean hold, ms")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="+/- this, ms")
    parser.add_argument("--reorder", type=float, default=0.0,
                        help="fraction of packets let through at once (default 0)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    stop = [False]

    def on_signal(signum: int, frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        shaper = Shaper(args.queue, args.delay_ms / 1000, args.jitter_ms / 1000,
                        args.reorder, args.seed)
        shaper.bind()
    except (ShaperError, OSError, ValueError) as err:
        print(f"shaper: {err}", file=sys.stderr)
        return 1
    print(f"shaping queue {args.queue}", flush=True)
    shaper.run(stop)
    print(f"shaper: queue {args.queue}: {shaper.passed} packets passed, "
          f"{shaper.overtaking} overtook held ones", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
