"""Every Hypothesis strategy of the test suite, in one place."""

from __future__ import annotations

from hypothesis import strategies as st

from ambrosia_core.addresses import MAX_PORT, Address
from ambrosia_core.wire import (
    AttachTo,
    BecomingPrimary,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    CountReplayableRpcBatch,
    InitialMessage,
    LogRecord,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    TrimTo,
    UpgradeService,
    UpgradeTakeCheckpoint,
    check_bytes,
    encode_checkpoint_record,
)

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
# Mostly one-byte method ids (the hot path), sometimes any int32.
method_ids = st.one_of(st.integers(-64, 63), int32s)
rpc_types = st.sampled_from([0, 1, 2])
small_bytes = st.binary(max_size=40)
names = st.text(max_size=12)


@st.composite
def incoming_rpcs(draw: st.DrawFn) -> Rpc:
    """An RPC as a binding receives it: a call, or (reserved 1..255) a C#-style return value."""
    if draw(st.integers(0, 4)) == 0:
        return Rpc(0, 0, draw(small_bytes), draw(st.integers(1, 255)))
    return Rpc(draw(method_ids), draw(rpc_types), draw(small_bytes))


@st.composite
def outgoing_rpcs(draw: st.DrawFn) -> OutgoingRpc:
    """An RPC as a binding sends it; the destination "" is a self-call."""
    dest = draw(st.one_of(st.just(""), names))
    if draw(st.integers(0, 4)) == 0:
        return OutgoingRpc(dest, 0, 0, draw(small_bytes), draw(st.integers(1, 255)))
    return OutgoingRpc(dest, draw(method_ids), draw(rpc_types), draw(small_bytes))


@st.composite
def counted_batches(draw: st.DrawFn) -> CountReplayableRpcBatch:
    rpcs = tuple(draw(st.lists(incoming_rpcs(), max_size=5)))
    return CountReplayableRpcBatch(rpcs, draw(st.integers(0, len(rpcs))))


# Messages that may sit in a data or control record sent to a binding (Checkpoint travels
# only in its own -2 record).
to_binding_messages = st.one_of(
    incoming_rpcs(),
    st.just(TakeCheckpoint()),
    st.lists(incoming_rpcs(), max_size=5).map(lambda r: RpcBatch(tuple(r))),
    small_bytes.map(InitialMessage),
    st.just(UpgradeTakeCheckpoint()),
    st.just(TakeBecomingPrimaryCheckpoint()),
    st.just(UpgradeService()),
    counted_batches(),
    st.just(BecomingPrimary()),
)

# Messages a binding sends, except Checkpoint (see ``to_coordinator_streams``).
to_coordinator_messages = st.one_of(
    outgoing_rpcs(),
    names.map(AttachTo),
    st.just(TakeCheckpoint()),
    st.lists(outgoing_rpcs(), max_size=5).map(lambda r: RpcBatch(tuple(r))),
    small_bytes.map(InitialMessage),
)

link_messages = st.one_of(
    incoming_rpcs(),
    st.lists(incoming_rpcs(), max_size=5).map(lambda r: RpcBatch(tuple(r))),
    counted_batches(),
    int64s.map(TrimTo),
)

committer_ids = int32s
checkpoint_blobs = st.binary(max_size=300)


@st.composite
def record_streams(draw: st.DrawFn) -> tuple[bytes, list[object]]:
    """A valid coordinator -> binding stream and the events it must decode to.

    Data records have contiguous sequence ids; control records (-1) and checkpoint
    records (-2, followed by their raw bytes) are mixed in.
    """
    committer = draw(committer_ids)
    seq = draw(st.integers(0, 2**40))
    parts: list[bytes] = []
    events: list[object] = []
    for kind in draw(st.lists(st.sampled_from(["data", "data", "control", "checkpoint"]),
                              max_size=8)):
        if kind == "checkpoint":
            blob = draw(checkpoint_blobs)
            parts.append(encode_checkpoint_record(committer, len(blob)) + blob)
            events.append(LogRecord(committer, -2, [Checkpoint(len(blob))], 0))
            if blob:
                events.append(CheckpointChunk(blob))
            events.append(CheckpointEnd(len(blob)))
            continue
        messages = draw(st.lists(to_binding_messages, min_size=1, max_size=4))
        seq_id = -1 if kind == "control" else seq
        if kind == "data":
            seq += 1
        record = LogRecord(committer, seq_id, messages)
        encoded = record.encode()
        parts.append(encoded)
        body = encoded[24:]
        events.append(LogRecord(committer, seq_id, messages, check_bytes(body)))
    return b"".join(parts), events


@st.composite
def to_coordinator_streams(draw: st.DrawFn) -> tuple[bytes, list[object]]:
    """A valid binding -> coordinator stream (Checkpoints followed by raw bytes) and its events."""
    parts: list[bytes] = []
    events: list[object] = []
    for _ in range(draw(st.integers(0, 10))):
        if draw(st.integers(0, 5)) == 0:
            blob = draw(checkpoint_blobs)
            parts.append(Checkpoint(len(blob)).encode() + blob)
            events.append(Checkpoint(len(blob)))
            if blob:
                events.append(CheckpointChunk(blob))
            events.append(CheckpointEnd(len(blob)))
        else:
            msg = draw(to_coordinator_messages)
            parts.append(msg.encode())
            events.append(msg)
    return b"".join(parts), events


@st.composite
def cut_points(draw: st.DrawFn, length: int) -> list[int]:
    """Positions at which to split a stream of ``length`` bytes."""
    return draw(st.lists(st.integers(0, length), max_size=12))


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` damaged: bits flipped, bytes inserted or deleted, or cut short."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "insert" or not buf:
            at = draw(st.integers(0, len(buf)))
            buf[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "flip":
            at = draw(st.integers(0, len(buf) - 1))
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "delete":
            at = draw(st.integers(0, len(buf) - 1))
            del buf[at : at + draw(st.integers(1, 8))]
        else:
            del buf[draw(st.integers(0, len(buf))) :]
    return bytes(buf)


# Hosts as written in HOST:PORT: IPv4 and IPv6 addresses (the latter with and without a
# zone) and RFC 1123 host names, whose labels may be all digits.
_label = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?", fullmatch=True)
host_names = st.lists(_label, min_size=1, max_size=4).map(".".join)
ipv6_hosts = st.one_of(
    st.ip_addresses(v=6).map(str),
    st.tuples(st.ip_addresses(v=6), st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True)).map(
        lambda p: f"{p[0]}%{p[1]}"),
)
hosts = st.one_of(st.ip_addresses(v=4).map(str), ipv6_hosts, host_names)
addresses = st.builds(Address, hosts, st.integers(0, MAX_PORT))
