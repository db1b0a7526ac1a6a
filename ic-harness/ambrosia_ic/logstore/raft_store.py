"""One instance's log, checkpoints and registration in a ØMQ RAFT cluster: the transport
around ``raft_entries`` (whose ``InstanceView`` holds the rules every reader applies) and
``raft_tenure`` (the claim and the fenced append as steps with no I/O, which the
simulator runs too).

Nothing here needs a shared file system: a primary, a checkpointing secondary and
standbys on different hosts each hold a ``RaftLogStore`` on the same cluster.

- A primary claims the next epoch (``claim``), then appends group commits of records
  (``append``, or ``RaftGroupCommit`` which gathers records while one append is in flight).
  An append counts only after the writer has read the log up to the append's index and
  found no newer claim before it: otherwise every reader ignores it, and ``append``
  raises ``LockLostError`` so the fenced primary acknowledges nothing.
- Everyone follows the log with ``catch_up`` (RequestEntries from where the view is)
  and ``wait`` (the leader's StateBroadcast says when there is more).
- The primary renews its lease with ``heartbeat`` when idle; a standby that saw nothing
  of the current epoch for ``lease`` seconds (``silent_for``) may ``claim``. The silence
  counts only time in which this reader could read the cluster: a read that waited
  longer than ``stall`` (a leader lost, an election) restarts it when the cluster
  answers again (plus the time the primary's client may take to find the new leader
  after ours), since the primary's heartbeats waited for the same leader; an election
  alone costs no takeover. Safety does not depend on the lease: a paused primary that
  wakes up is fenced by the log order.
  The lease keeps a fenced primary from writing at all: a claim is sent no sooner than
  a lease after the primary's last entry that counted was sent, so a primary that sends
  within half a lease of that needs no look; after longer (a pause, a stall), it reads
  the log first and, finding a newer claim, sends nothing; finding none, it renews by
  claiming the next epoch itself (a look does not stop a claim in flight), and writes on
  only if its claim was the first of that epoch.
- Checkpoints are written as parts and an end entry carrying their XXH64; readers verify
  the check bytes before a byte of the checkpoint is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import xxhash

from ambrosia_ic.errors import LogCorruptionError, LogStoreError

from ..raft.client import RaftClient, Subscription
from ..raft.errors import RaftError, StreamLostError
from ..registry.raft_address import RaftAddress, parse_address
from .raft_entries import (
    CheckpointEnd,
    Event,
    InstanceView,
    chunked,
    encode_checkpoint_end,
    encode_checkpoint_part,
    encode_heartbeat,
    encode_records,
    encode_registration,
    part_body,
)
from .raft_rules import Silence
from .raft_tenure import CatchUp, Propose, RaftTenure, Steps

__all__ = ["CHECKPOINT_PART", "HEARTBEAT", "LEASE", "RaftGroupCommit", "RaftLogStore"]

CHECKPOINT_PART = 1 << 20
HEARTBEAT = 0.2  # a primary with nothing to append renews its lease this often
LEASE = 1.0  # a standby that saw nothing of the current epoch this long may claim
MAX_GROUP_BYTES = 1 << 20


class RaftLogStore:
    """Instance ``name``'s part of the cluster at ``address``.

    Args:
        address: a ``raft://`` address or a parsed one.
        name: the instance.
        timeout: how long one cluster call may take (``RaftUnavailableError`` after).
        lease: the seconds of silence after which a standby may claim.
    """

    def __init__(self, address: str | RaftAddress, name: str, *, timeout: float = 10.0,
                 lease: float = LEASE) -> None:
        self.address = parse_address(address) if isinstance(address, str) else address
        self.name = name
        self._writer = RaftClient(self.address.urls, self.address.secret, timeout=timeout)
        self._reader = RaftClient(self.address.urls, self.address.secret, timeout=timeout,
                                  context=self._writer.context)
        self._sub: Subscription | None = None
        self.lease = lease
        # The view, the silence and the epoch held, with the claim and append rules. After
        # a stall, the primary's client may find the new leader later than ours: up to one
        # unanswered request and one election grace (``raft.client``).
        self.tenure = RaftTenure(name, time.monotonic, lease,
                                 self._writer.response_ttl + self._writer.election_grace)
        # Told the new epoch when this primary renewed by claiming it (its epoch file).
        self.on_renewed: Callable[[int], None] = lambda epoch: None
        self._read_lock = asyncio.Lock()
        self._unread: list[Event] = []

    def close(self) -> None:
        if self._sub is not None:
            self._sub.close()
        self._reader.close()
        self._writer.close()

    @property
    def view(self) -> InstanceView:
        return self.tenure.view

    @property
    def held(self) -> int | None:
        return self.tenure.held

    @property
    def silence(self) -> Silence:
        return self.tenure.silence

    async def _run(self, steps: Steps) -> Any:
        """Take ``steps`` (``raft_tenure``) over the cluster; what they return."""
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                return done.value
            answer = None
            if isinstance(step, CatchUp):
                await self._catch_up(step.until)
            elif isinstance(step, Propose):
                rid = self._writer.request_ids.new()
                answer = (rid, await self._writer.request_update(step.data, rid))
            else:
                self.on_renewed(step.epoch)

    # ------------------------------------------------------------------ reading
    async def catch_up(self, until: int | None = None) -> list[Event]:
        """Apply every committed entry past the view (at least up to ``until``) and
        return the events (``drain_events`` returns them too).

        Raises:
            LogStoreError: the cluster could not be read (its own error is the cause),
                so that a reader through the store's port knows no Raft error.
        """
        try:
            return await self._catch_up(until)
        except RaftError as err:
            raise LogStoreError(str(err)) from err

    async def _catch_up(self, until: int | None = None) -> list[Event]:
        out: list[Event] = []
        async with self._read_lock:
            asked = time.monotonic()
            while True:
                try:
                    async for got in self._reader.entries(self.view.last_index):
                        if got.chunk is not None:
                            raise LogCorruptionError(
                                "raft log", got.last_index, "the cluster compacted the log "
                                "into a snapshot this store does not read")
                        for e in got.entries:
                            evs = self.view.apply(e.index, e.reqid, e.data)
                            out += evs
                            # Kept at once: a read that fails later loses none of them.
                            self._unread += evs
                except StreamLostError:
                    continue  # a new leader streams the rest
                if until is None or self.view.last_index >= until:
                    break
                await asyncio.sleep(0.005)  # the commit index reached a follower late
            self.tenure.read(asked, out)
        return out

    def drain_events(self) -> list[Event]:
        """Every event of every catch-up (a claim's and an append's too) since the last
        drain: a follower delivers from here, so nothing read on the way is lost."""
        out, self._unread = self._unread, []
        return out

    async def wait(self, timeout: float) -> None:
        """Return when the leader broadcasts new entries (or after ``timeout``)."""
        try:
            if self._sub is None:
                self._sub = await self._reader.subscribe()
            got = await self._sub.receive(timeout)
        except RaftError:
            got = None
        if got is None or self._sub is None:
            if self._sub is not None:
                self._sub.close()  # the leader may be gone: ask for the new one next time
                self._sub = None
            return
        while got is not None and got.last_applied <= self.view.last_index:
            got = await self._sub.receive(timeout)

    def silent_for(self) -> float:
        """Seconds since this reader last saw anything of the current epoch (infinite
        once its holder resigned: nobody is left to wait for)."""
        return self.tenure.silent_for()

    @property
    def stalled_for(self) -> float:
        """The longest stall of the cluster since the owner last took it (set to 0)."""
        return self.silence.stalled_for

    @stalled_for.setter
    def stalled_for(self, value: float) -> None:
        self.silence.stalled_for = value

    # ------------------------------------------------------------------ writing
    async def claim(self, holder: dict[str, Any], *, after: int | None = None,
                    if_silent: bool = False) -> bool:
        """Claim the epoch after the newest one this view knows; True if this claim was
        the first of its epoch in the log (``RaftTenure.claim``: ``after`` and
        ``if_silent`` are explained there)."""
        return bool(await self._run(self.tenure.claim(holder, after=after,
                                                      if_silent=if_silent)))

    def check(self) -> None:
        """Raises LockLostError if a newer epoch was claimed (as far as the view knows), or
        this store holds none (never claimed, or resigned)."""
        self.tenure.check()

    async def append(self, records: Sequence[bytes]) -> int:
        """Append ``records`` as one entry; returns its log index once it counts.

        Raises:
            LockLostError: this store does not hold the newest epoch (not claimed, or
                fenced by a newer claim); the records do not count for any reader.
        """
        return int(await self._run(self.tenure.append(
            lambda epoch: encode_records(self.name, epoch, records))))

    async def heartbeat(self) -> None:
        """Renew the lease (the primary, when it has nothing to append)."""
        assert self.held is not None, "heartbeat before claim"
        await self._run(self.tenure.append(lambda epoch: encode_heartbeat(self.name, epoch)))

    async def resign(self) -> None:
        """Give up the epoch (a primary that stops): standbys claim the next one without
        waiting out the lease. Nothing is appended after it by this store.

        Raises:
            LockLostError: a newer epoch was claimed already (nothing to give up).
        """
        assert self.held is not None, "resign before claim"
        await self._run(self.tenure.append(
            lambda epoch: encode_heartbeat(self.name, epoch, resign=True)))
        self.tenure.held = None

    # ------------------------------------------------------------------ checkpoints
    async def write_checkpoint(self, number: int, pieces: Iterable[bytes]) -> bool:
        """Write checkpoint ``number`` (the concatenation of ``pieces``) in parts with
        check bytes. True if it is the one readers will use (the first complete)."""
        await self._catch_up()
        epoch = self.view.epoch
        digest = xxhash.xxh64()
        size = parts = 0
        buf = b"".join(pieces)
        for piece in chunked(buf, CHECKPOINT_PART):
            await self._writer.request_update(
                encode_checkpoint_part(self.name, epoch, number, parts, piece))
            digest.update(piece)
            size += len(piece)
            parts += 1
        index = await self._writer.request_update(encode_checkpoint_end(
            self.name, epoch, number, parts, size, digest.intdigest()))
        await self._catch_up(until=index)
        end = self.view.checkpoints.get(number)
        return end is not None and end.index == index

    async def read_checkpoint(self, end: CheckpointEnd) -> bytes:
        """The bytes of a complete checkpoint, its check bytes verified.

        Raises:
            LogCorruptionError: the parts do not add up to the size or the check bytes.
        """
        digest = xxhash.xxh64()
        out = []
        for index in end.parts:
            got = await self._reader.read(index - 1, 1)
            if len(got) != 1:
                raise LogCorruptionError("raft log", index, "a checkpoint part is missing")
            body = part_body(got[0].data)
            digest.update(body)
            out.append(body)
        data = b"".join(out)
        if len(data) != end.size or digest.intdigest() != end.check:
            raise LogCorruptionError("raft log", end.index,
                                     f"checkpoint {end.number}: check bytes do not match")
        return data

    # ------------------------------------------------------------------ registry
    async def register(self, registration: dict[str, Any]) -> int:
        """Store the instance's registration in the cluster (the newest one counts)."""
        return await self._writer.request_update(encode_registration(self.name, registration))

    async def registration(self) -> dict[str, Any] | None:
        await self._catch_up()
        return self.view.registration


class RaftGroupCommit:
    """Gathers records while one append is in flight, so the cluster sees one entry per
    round trip, not one per record. ``submit`` resolves with the entry's index once the
    record counts (or raises what the append raised, ``LockLostError`` when fenced)."""

    def __init__(self, store: RaftLogStore, max_bytes: int = MAX_GROUP_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._pending: list[tuple[bytes, asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    def submit(self, record: bytes) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self._failed is not None:
            fut.set_exception(self._failed)
            return fut
        self._pending.append((record, fut))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        return fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch: list[tuple[bytes, asyncio.Future[int]]] = []
                size = 0
                while self._pending and size < self.max_bytes:
                    item = self._pending.pop(0)
                    batch.append(item)
                    size += len(item[0])
                try:
                    index = await self.store.append([r for r, _ in batch])
                except Exception as err:  # every waiter learns why; nothing more is sent
                    self._failed = err
                    for _, fut in batch + self._pending:
                        if not fut.done():
                            fut.set_exception(err)
                    self._pending.clear()
                    return
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(index)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
