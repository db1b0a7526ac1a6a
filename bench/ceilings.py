"""Ceilings: what plain Python does with the same bytes on this machine, in the same run.

Each figure of ``bench_throughput`` and ``bench_replay`` is reported as a ratio to one of
these (``bench_wire`` has its own: the bare framing loop). A ceiling does the essential
work of its figure and nothing else, so a ratio of 1.0 is the most a Python
implementation of the same design can reach.

- ``pipeline_rate``: durable fork RPCs. Four processes joined by loopback-like socket
  pairs, as the two immortals and their coordinators are: the sender packs a msgpack
  envelope per call into an outgoing-form RPC frame and writes bursts; its "coordinator"
  frames them, turns each into the incoming form by slicing and sends one XXH64-checked
  record per read; the receiver's "coordinator" checks the record, appends it to a file
  and fsyncs once per read (group commit) before passing it on; the receiving "binding"
  frames the RPCs, unpacks each envelope and calls the method. One ack per burst goes
  back to the sender (flow control, as the awaited echo does).
- ``round_trips``: the awaited call. Four processes joined by TCP loopback connections
  (TCP_NODELAY), as the two immortals and their coordinators are: the caller packs a
  msgpack envelope into an outgoing-form RPC and waits; each "coordinator" turns a frame
  from its binding into the incoming form by slicing and sends it to the other as one
  XXH64-checked record, and a record from the other is checked, appended to its log and
  synced (fdatasync after the file's first fsync, as the coordinator's log writer does)
  before its frame goes to its binding; the callee unpacks the envelope, calls the method
  and sends the result the same way back. Two log syncs per round trip.
- ``replay_rate``: replay during recovery. One loop over the same log records: header,
  XXH64, frame, msgpack, call.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import selectors
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any

import msgpack
import xxhash

from ambrosia_core.loops import DEFAULT_SLICE_US, shorten_slice
from ambrosia_core.wire import encode_outgoing_rpc

__all__ = ["pipeline_rate", "replay_rate", "round_trips", "tcp_pair"]

_HEADER = struct.Struct("<iiQq")
_READ = 1 << 20


def _frames(buf: bytes, pos: int) -> tuple[list[tuple[int, int]], int]:
    """(start, end) of each whole ``[size varint][frame]`` in ``buf[pos:]``; where the
    first incomplete one starts."""
    out = []
    n = len(buf)
    while pos < n:
        b = buf[pos]
        q = pos + 1
        if b < 0x80:
            size = b >> 1
        else:
            u = b & 0x7F
            shift = 7
            while True:
                if q >= n:
                    return out, pos
                b = buf[q]
                q += 1
                u |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            size = u >> 1
        if q + size > n:
            break
        out.append((q, q + size))
        pos = q + size
    return out, pos


def _records(buf: bytes, pos: int) -> tuple[list[tuple[int, int]], int]:
    """(body start, end) of each whole checked record in ``buf[pos:]``."""
    out = []
    n = len(buf)
    while pos + 24 <= n:
        _, length, check, _ = _HEADER.unpack_from(buf, pos)
        if pos + length > n:
            break
        body = buf[pos + 24 : pos + length]
        if xxhash.xxh64_intdigest(body) != check:
            raise ValueError("check bytes do not match")
        out.append((pos + 24, pos + length))
        pos += length
    return out, pos


def _sender(out: socket.socket, acks: socket.socket, forks: int, burst: int, payload: bytes,
            method_id: int, result: Any) -> None:
    t0 = time.perf_counter()
    sent = 0
    while sent < forks:
        n = min(burst, forks - sent)
        frames = []
        for i in range(sent, sent + n):
            env = msgpack.packb([time.time_ns(), 12345, -1, "source", [[i, payload], {}]],
                                use_bin_type=True)
            frames.append(encode_outgoing_rpc("sink", method_id, 1, env))
        out.sendall(b"".join(frames))
        sent += n
        acks.recv(1)
    result.value = forks / (time.perf_counter() - t0)
    out.shutdown(socket.SHUT_WR)  # other processes hold copies: close() would not end it


def _sender_coordinator(inp: socket.socket, out: socket.socket) -> None:
    buf = b""
    seq = 0
    while data := inp.recv(_READ):
        buf += data
        spans, pos = _frames(buf, 0)
        parts = []
        for a, b in spans:
            # [0x00 RPC][dest len][dest][rest] -> [0x00 RPC][rest], with a new size
            name_len = buf[a + 1] >> 1
            rest = buf[a + 2 + name_len : b]
            parts.append(bytes(((len(rest) + 1) << 1,)) if len(rest) < 63 else
                         _varint(len(rest) + 1))
            parts.append(b"\x00")
            parts.append(rest)
        buf = buf[pos:]
        if parts:
            body = b"".join(parts)
            out.sendall(_HEADER.pack(1, 24 + len(body), xxhash.xxh64_intdigest(body), seq)
                        + body)
            seq += 1
    out.shutdown(socket.SHUT_WR)


def _envelope_at(frame: bytes, method_at: int) -> int:
    """Where the envelope starts, after the method id varint at ``method_at`` and the
    RPC type byte."""
    q = method_at
    while frame[q] >= 0x80:
        q += 1
    return q + 2


def _varint(n: int) -> bytes:
    u = n << 1
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _receiver_coordinator(inp: socket.socket, out: socket.socket, log_dir: str) -> None:
    with open(os.path.join(log_dir, "log"), "ab") as log:
        buf = b""
        while data := inp.recv(_READ):
            buf += data
            spans, pos = _records(buf, 0)
            if spans:
                chunk = buf[:pos]
                log.write(chunk)
                log.flush()
                os.fsync(log.fileno())  # group commit: one fsync per read
                out.sendall(chunk)
            buf = buf[pos:]
    out.shutdown(socket.SHUT_WR)


def _receiver(inp: socket.socket, acks: socket.socket, forks: int, burst: int) -> None:
    state = {"count": 0, "last": -1}

    def take(i: int, payload: bytes) -> None:
        if i != state["last"] + 1:
            raise ValueError(f"fork {i} after {state['last']}")
        state["last"] = i
        state["count"] += 1

    buf = b""
    while state["count"] < forks:
        data = inp.recv(_READ)
        if not data:
            break
        buf += data
        spans, pos = _records(buf, 0)
        for a, b in spans:
            for fa, fb in _frames(buf[a:b], 0)[0]:
                # [0x00][reserved][method id][rpc type][envelope]
                frame = buf[a + fa : a + fb]
                _, _, _, _, (args, kwargs) = msgpack.unpackb(frame[_envelope_at(frame, 2):])
                take(*args, **kwargs)
                if state["count"] % burst == 0 or state["count"] == forks:
                    acks.sendall(b"\x01")
        buf = buf[pos:]


def pipeline_rate(forks: int, burst: int, payload_size: int) -> float:
    """Durable fork RPCs per second through the plain-Python four-process pipeline."""
    ctx = mp.get_context("fork")
    s1, c1 = socket.socketpair()  # sender -> its coordinator
    c2, r2 = socket.socketpair()  # coordinator -> coordinator
    r3, b3 = socket.socketpair()  # receiver's coordinator -> receiver
    ack_in, ack_out = socket.socketpair()  # receiver -> sender, one byte per burst
    result = ctx.Value("d", 0.0)
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as log_dir:
        procs = [
            ctx.Process(target=_sender, args=(s1, ack_in, forks, burst, bytes(payload_size),
                                              0x2F3C4D5E, result)),
            ctx.Process(target=_sender_coordinator, args=(c1, c2)),
            ctx.Process(target=_receiver_coordinator, args=(r2, r3, log_dir)),
            ctx.Process(target=_receiver, args=(b3, ack_out, forks, burst)),
        ]
        for p in procs:
            p.start()
        for s in (s1, c1, c2, r2, r3, b3, ack_in, ack_out):
            s.close()
        procs[0].join(600)
        for p in procs[1:]:
            p.join(30)
        if any(p.exitcode != 0 for p in procs) or not result.value:
            raise RuntimeError(f"the ceiling pipeline failed: {[p.exitcode for p in procs]}")
    return float(result.value)


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Both ends of one TCP loopback connection, with TCP_NODELAY (as the immortals' are)."""
    server = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(server.getsockname())
    b, _ = server.accept()
    server.close()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return a, b


def _to_incoming(buf: bytes, a: int, b: int) -> bytes:
    """The incoming form of the outgoing-form RPC frame ``buf[a:b]`` (destination cut)."""
    name_len = buf[a + 1] >> 1
    rest = buf[a + 2 + name_len : b]
    return _varint(len(rest) + 1) + b"\x00" + rest


def _rt_coordinator(binding: socket.socket, link: socket.socket, log_dir: str) -> None:
    """Frames from the binding go to the link as records; records from the link are
    checked, logged and synced, then their frames go to the binding."""
    fd = os.open(os.path.join(log_dir, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    synced = False
    seq = 0
    bufs = {binding: b"", link: b""}
    sel = selectors.DefaultSelector()
    for s in (binding, link):
        sel.register(s, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in sel.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                data = sock.recv(_READ)
                if not data:
                    return
                buf = bufs[sock] + data
                if sock is binding:
                    spans, pos = _frames(buf, 0)
                    if spans:
                        body = b"".join(_to_incoming(buf, a, b) for a, b in spans)
                        link.sendall(_HEADER.pack(1, 24 + len(body),
                                                  xxhash.xxh64_intdigest(body), seq) + body)
                        seq += 1
                else:
                    spans, pos = _records(buf, 0)
                    if spans:
                        os.write(fd, buf[:pos])
                        if synced:
                            os.fdatasync(fd)
                        else:
                            os.fsync(fd)
                            synced = True
                        binding.sendall(b"".join(buf[a:b] for a, b in spans))
                bufs[sock] = buf[pos:]
    finally:
        os.close(fd)


def _rt_callee(conn: socket.socket) -> None:
    buf = b""
    while data := conn.recv(_READ):
        buf += data
        spans, pos = _frames(buf, 0)
        for a, b in spans:
            frame = buf[a:b]
            _, call_id, _, _, (args, _) = msgpack.unpackb(frame[_envelope_at(frame, 2):])
            env = msgpack.packb([call_id, True, args[0]], use_bin_type=True)
            conn.sendall(encode_outgoing_rpc("caller", -3, 1, env))
        buf = buf[pos:]


def _rt_caller(conn: socket.socket, pings: int, method_id: int, result: str) -> None:
    out = []
    buf = b""
    for i in range(pings):
        t0 = time.perf_counter_ns()
        env = msgpack.packb([time.time_ns(), i, -1, "caller", [[i], {}]], use_bin_type=True)
        conn.sendall(encode_outgoing_rpc("callee", method_id, 0, env))
        while True:
            spans, _ = _frames(buf, 0)
            if spans:
                break
            buf += conn.recv(_READ)
        a, b = spans[0]
        frame = buf[a:b]
        got = msgpack.unpackb(frame[_envelope_at(frame, 2):])
        buf = buf[b:]
        if got[0] != i or got[2] != i:
            raise ValueError(f"reply {got} to call {i}")
        out.append(time.perf_counter_ns() - t0)
    with open(result, "w") as f:
        f.write(" ".join(map(str, out)))


def _alone(target: Callable[..., None], socks: list[socket.socket], *args: Any) -> None:
    """Run ``target`` with only its own sockets open (``args``), so each connection ends
    when the one process holding its other end stops; with the scheduler slice the
    immortals' processes ask for (a fair ceiling on a busy machine too)."""
    shorten_slice(DEFAULT_SLICE_US)
    for s in socks:
        if s not in args:
            s.close()
    target(*args)


def round_trips(pings: int, warmup: int = 20) -> list[int]:
    """Round trips (ns) of an awaited call through the plain-Python four processes."""
    ctx = mp.get_context("fork")
    caller, coord_a = tcp_pair()
    link_a, link_b = tcp_pair()
    coord_b, callee = tcp_pair()
    with tempfile.TemporaryDirectory(prefix="bench-rt-") as tmp:
        result = os.path.join(tmp, "latencies")
        os.mkdir(os.path.join(tmp, "a"))
        os.mkdir(os.path.join(tmp, "b"))
        socks = [caller, coord_a, link_a, link_b, coord_b, callee]
        procs = [
            ctx.Process(target=_alone, args=(f, socks, *args)) for f, args in (
                (_rt_caller, (caller, pings + warmup, 0x2F3C4D5E, result)),
                (_rt_coordinator, (coord_a, link_a, os.path.join(tmp, "a"))),
                (_rt_coordinator, (coord_b, link_b, os.path.join(tmp, "b"))),
                (_rt_callee, (callee,)),
            )
        ]
        for p in procs:
            p.start()
        for s in socks:
            s.close()
        procs[0].join(600)
        for p in procs[1:]:
            p.join(30)
            if p.exitcode is None:
                p.kill()
        if any(p.exitcode != 0 for p in procs) or not os.path.exists(result):
            raise RuntimeError(f"the round-trip ceiling failed: {[p.exitcode for p in procs]}")
        with open(result) as f:
            return [int(x) for x in f.read().split()][warmup:]


def replay_rate(records: bytes, call: Callable[..., Any]) -> tuple[float, int]:
    """(records per second, calls) for one plain loop over ``records`` (data records of
    incoming-form RPCs): header, XXH64, frame, msgpack, call."""
    unpack = _HEADER.unpack_from
    xxh = xxhash.xxh64_intdigest
    unpackb = msgpack.unpackb
    t0 = time.perf_counter()
    pos = 0
    n = len(records)
    count = calls = 0
    while pos < n:
        _, length, check, _ = unpack(records, pos)
        end = pos + length
        body = records[pos + 24 : end]
        if xxh(body) != check:
            raise ValueError("check bytes do not match")
        q = 0
        while q < len(body):
            b = body[q]
            size = b >> 1 if b < 0x80 else ((b & 0x7F) | (body[q + 1] << 7)) >> 1
            start = q + (1 if b < 0x80 else 2)
            # [0x00][reserved][method id][rpc type][envelope]
            env = _envelope_at(body, start + 2)
            _, _, _, _, (args, kwargs) = unpackb(body[env : start + size])
            call(*args, **kwargs)
            calls += 1
            q = start + size
        pos = end
        count += 1
    return count / (time.perf_counter() - t0), calls
