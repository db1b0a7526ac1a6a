"""Active/active with the log in a ØMQ RAFT cluster: replicas on different machines, no
shared file system (``register-instance --log-store raft://...``).

The roles and the start-up flow are those of ``shared_dir``; what they rest on differs:

- the primary is whoever holds the newest epoch claimed in the cluster's log (see
  ``logstore.raft_entries``): a standby claims when the primary was silent past the lease;
  an old primary's records after a newer claim are ignored by every reader, and its
  appends fail (``LockLostError``) before anything is acknowledged or delivered;
- each data record (the coordinator's own record bytes, as a standalone coordinator
  writes them to a file) is one entry of the cluster's log, appended by the committer's
  group commit; a local copy goes to the replica's own directory for ``log dump``;
- checkpoints go into the cluster with check bytes, numbered by the sequence id they start
  at; the checkpointing secondary (the lowest-numbered replica that is not the primary)
  takes one when ``checkpoint_every`` records passed since the newest, the next one up
  only after twice as many (its elders may be down), and so on (two of one number hold
  the same state: the newest counts);
- senders find the primary through its epoch claim in the cluster, which names its
  advertised link address (``ic_host``, ``ic_port``: ``coordinator.cluster_primary``),
  wherever they run; it also writes an epoch file in the
  instance's directory (``lease.current_primary``) for tools on this machine.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any, TextIO

from ambrosia_core.durable import make_dirs, replace_durably
from ambrosia_core.errors import CoordinatorError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.wire import (
    HEADER_SIZE,
    TakeCheckpoint,
    check_bytes,
    encode_checkpoint_record,
)
from ambrosia_core.wire.records import HEADER
from ambrosia_ic.errors import LockLostError, LogCorruptionError

from .. import registry
from ..coordinator import LinkOptions, actions, checkpoints, process, startup
from ..coordinator.directory import DirectoryFactory
from ..coordinator.phase import Phase
from ..coordinator.sink import FencedSink
from ..lease import EPOCH_PREFIX, Epochs
from ..logstore import (
    CHECKPOINT_PREFIX,
    LOG_PREFIX,
    CheckpointFile,
    DiskRecord,
    LogWriter,
    checkpoint_path,
    log_path,
    remove_unkept,
)
from ..logstore.raft_entries import Records
from ..logstore.raft_rules import standby_claim, standby_wait
from ..logstore.raft_store import RaftLogStore
from ..logstore.watermarks import checked, decode_watermarks
from ..raft.errors import RaftError
from ..recovery import read_state
from .common import claim_info, deliver_records, notify_superseded, replica_coordinator
from .watch import PrimaryWatch

__all__ = ["RaftReplica", "RaftSink", "decode_record"]

POLL = 0.05  # the longest a follower waits for the leader's broadcast before reading
RESIGN_TIMEOUT = 2.0


def decode_record(data: bytes, index: int) -> DiskRecord:
    """One data record as the committer wrote it (disk form: negative length, then the
    watermarks), checked.

    Raises:
        LogCorruptionError: it does not parse, or its check bytes do not match.
    """
    if len(data) < HEADER_SIZE:
        raise LogCorruptionError("raft log", index, "a record shorter than its header")
    committer, stored, check, seq = HEADER.unpack_from(data, 0)
    length = -stored - 1
    if stored >= 0 or length < HEADER_SIZE or length > len(data):
        raise LogCorruptionError("raft log", index, f"length field {stored} is not a record's")
    body = data[HEADER_SIZE:length]
    if check_bytes(body) != check:
        raise LogCorruptionError("raft log", index, f"record {seq}: check bytes do not match")
    try:
        inputs, end, epoch = decode_watermarks(data, length, len(data))
    except Exception as err:  # Incomplete or WireFormatError: either way damaged
        raise LogCorruptionError("raft log", index, f"record {seq}: watermarks: {err}") from None
    if end != len(data):
        raise LogCorruptionError("raft log", index, f"record {seq}: bytes after its watermarks")
    if not checked(data, 0, length, end):
        raise LogCorruptionError("raft log", index, f"record {seq}: check bytes do not match "
                                 "its header and watermarks")
    wire = HEADER.pack(committer, length, check, seq) + body
    return DiskRecord(seq, 0, end, wire, inputs, epoch)


class RaftSink(FencedSink):
    """The committer's writes go to the cluster (fenced by its epochs), then to a local
    copy. ``write`` runs in a worker thread (the committer's ``to_thread``) and waits for
    the append on the event loop."""

    checkpoints_on_switch = False

    def __init__(self, store: RaftLogStore, local: Epochs) -> None:
        # The local copy is never synced: appending costs it nothing.
        super().__init__(local, region=0)
        self.store = store
        self.loop: asyncio.AbstractEventLoop | None = None
        self.first_checkpoint: Path | None = None  # a first start's, sent before record 0

    @property
    def epoch(self) -> int | None:
        return self.store.held

    def _run(self, coro: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def write(self, writer: LogWriter, data: bytes) -> None:
        if self.first_checkpoint is not None:
            path, self.first_checkpoint = self.first_checkpoint, None
            self._run(self.store.write_checkpoint(0, [path.read_bytes()]))
        self._run(self._append(data))
        writer.write(data)  # the local copy: the cluster holds the durable one

    async def _append(self, data: bytes) -> None:
        await self.store.append([data])
        self.store.drain_events()  # the primary's own records: delivered already

    def next_log(self, d: Path, n: int, old: LogWriter | None = None) -> LogWriter:
        self.store.check()
        return self.open_log(log_path(d, n))

    def remove_unkept(self, d: Path, keep: int, damaged: Any) -> None:
        remove_unkept(d, keep, (LOG_PREFIX, CHECKPOINT_PREFIX), damaged)


class RaftReplica:
    """Replica ``replica`` of an active/active instance whose log is in a cluster: a
    coordinator (``c``) writing through a ``RaftSink``, and the roles above as its
    start-up flow."""

    def __init__(self, reg: registry.Registration, home: Path, *, replica: int = 0,
                 stdout: TextIO | None = None, stderr: TextIO | None = None,
                 fsync_in_thread: bool | None = None, link: LinkOptions | None = None,
                 directory: DirectoryFactory | None = None) -> None:
        if not reg.log_store:
            raise CoordinatorError(f"{reg.instance_name} has no raft:// log store")
        self.shared_dir = registry.instance_dir(reg)  # where senders here look
        self.store = RaftLogStore(reg.log_store, reg.log_key, lease=reg.lease_ms / 1000)
        self.store.on_renewed = self._renewed  # after a pause, the primary's next epoch
        # The local copy of the log, for ``log dump``: the replica's own directory.
        own = self.shared_dir / f"replica{replica}"
        self.raft_sink = RaftSink(self.store, Epochs(own))
        self.c, self.replica = replica_coordinator(
            reg, home, replica, self.raft_sink, stdout=stdout, stderr=stderr,
            fsync_in_thread=fsync_in_thread, link=link, directory=directory)
        self.c.dir = own
        self.number = replica
        self.role = "starting"
        if self.replica.upgrade_version > reg.current_version:
            raise CoordinatorError(
                f"{self.c.core.who}: a live upgrade of replicas whose log is in a Raft cluster is "
                "not supported yet; register the instance's new version instead")
        self.checkpoint_every = max(16, self.c.core.trigger_bytes // 4096)
        self.lease = reg.lease_ms / 1000
        self.heartbeat_every = self.lease / 5
        self.loaded: int | None = None  # the checkpoint this replica started from
        self.backlog: list[DiskRecord] = []  # records read before a checkpoint was loaded
        # A standby watches the primary's process: its death ends the wait at once.
        self.watch = PrimaryWatch(self.c.name, self.c.secret, self.c.tls)
        self.c.link_server.watch_epoch = lambda: (
            self.store.held if self.role == "primary" else None)
        # The newer epoch that fenced this replica off (it then rejoins as a standby).
        self.fenced_by: int | None = None
        self.c.on_shutdown = self._on_shutdown

    async def run(self) -> int:
        try:
            make_dirs(self.c.dir)
            try:
                code, message = await process.serve(
                    self.c, f"replica={self.number} receive={self.c.receive_port} "
                            f"send={self.c.send_port} ic={self.c.ic_port}",
                    lambda: self._main)
            finally:
                self.watch.stop()
                self.raft_sink.epochs.close()
            if self.fenced_by is not None:
                self.c.log(f"fenced by epoch {self.fenced_by}, rejoining as a standby")
                return code
            if message:
                self.c.log(message)
            await self._resign()
            return code
        finally:
            self.c.link_server.drop_watchers()
            self.store.close()

    def _on_shutdown(self) -> None:
        """A primary that stops because a newer epoch was claimed (not a stop it was told
        to make) tells its binding, which starts over with the standby it rejoins as."""
        held = self.store.held
        if self.c.stopping and held is not None and self.store.view.epoch > held:
            self.fenced_by = self.store.view.epoch
            notify_superseded(self.c)

    def _info(self, **extra: Any) -> dict[str, Any]:
        return claim_info(self.c, self.number, **extra)

    async def _resign(self) -> None:
        """A primary that stops (its binding died, or it was told to) gives up its epoch,
        so a standby need not wait out the lease. Best effort: a cluster that does not
        take it in time leaves the lease to run out, as after ``kill -9``."""
        if self.role != "primary" or self.store.held is None:
            return
        epoch = self.store.held
        try:
            await asyncio.wait_for(self.store.resign(), RESIGN_TIMEOUT)
        except (RaftError, LockLostError, TimeoutError):
            return
        self.c.log(f"resigned epoch {epoch}: a standby takes over without waiting out the lease")

    # ------------------------------------------------------------------ the flow
    async def _main(self) -> None:
        self.raft_sink.loop = asyncio.get_running_loop()
        await self.store.catch_up()
        if self.store.view.epoch == 0 and await self.store.claim(self._info(), after=0):
            await self._first_start()
            return
        self.role = "standby"
        self.c.core.set_phase(Phase.FOLLOWING)
        self.c.log(f"following the log in {self.store.address} as a {self.role}")
        while True:
            await self._follow_cluster()
            view = self.store.view
            if view.holder.get("replica") != self.number:
                self.watch.follow(view.epoch, view.holder)
            if self.store.stalled_for:
                self.c.log(f"the cluster did not answer for {self.store.stalled_for:.3f} s "
                           "(a leader lost?): the primary's silence counts from its answer")
                self.store.stalled_for = 0.0
            silent = self.store.silent_for()
            ended = self.watch.gone == view.epoch and not math.isinf(silent)
            claiming = time.monotonic()
            move = standby_claim(view.epoch, silent, self.lease, ended=ended)
            if move is not None and await self.store.claim(
                    self._info(), after=move[0], if_silent=move[1]):
                self.watch.stop()
                if self.store.view.record_count == 0:
                    # The first start never logged its record 0: it is still owed.
                    await self._first_start()
                else:
                    gone = ("the primary resigned" if math.isinf(silent) else
                            "the primary's process ended (its watch closed)" if ended else
                            f"the primary was silent {silent:.3f} s (lease {self.lease:g} s)")
                    await self._raft_take_over(gone, time.monotonic() - claiming)
                return
            if self.loaded is not None and (self.c.core.group.next_seq - self.loaded
                                            >= self.checkpoint_every * (1 + self._rank())):
                await self._checkpoint_here()
            # A dead primary sends no broadcasts: wake up when its lease runs out, not
            # up to a poll interval later (a closed watch is seen within one).
            await self.store.wait(standby_wait(silent, self.lease, POLL))

    def _rank(self) -> int:
        """0 for the checkpointing secondary (the lowest-numbered replica that is not the
        primary); a higher rank checkpoints only when those below it have not, after
        ``checkpoint_every`` more records each (they may be down)."""
        primary = self.store.view.holder.get("replica")
        return sum(1 for k in range(self.number) if k != primary)

    async def _first_start(self) -> None:
        self.role = "primary"
        self.c.log(f"first start: primary of epoch {self.store.held}")
        self._publish_primary()
        self.c.spawn(self._heartbeat())
        self.raft_sink.first_checkpoint = checkpoint_path(self.c.dir, 1)
        await startup.first_start(self.c)
        await startup.go_live(self.c)

    async def _raft_take_over(self, gone: str, claim: float) -> None:
        self.role = "primary"
        reading = time.monotonic()
        before = self.c.core.group.next_seq
        await self._follow_cluster()  # everything committed before the claim
        # Where a takeover's time goes, for operators and the failover benchmark.
        self.c.log(f"took over epoch {self.store.held}: {gone}, claim {1000 * claim:.1f} ms, "
                 f"log up to the claim {1000 * (time.monotonic() - reading):.1f} ms "
                 f"({self.c.core.group.next_seq - before} records)")
        self._publish_primary()
        self.c.spawn(self._heartbeat())
        n = self.c.log_n + 1
        self.c.writer = await asyncio.to_thread(self.c.sink.next_log, self.c.dir, n)
        self.c.log_n = n
        self.c.core.become_primary()
        actions.run(self.c)
        self.c.log(f"primary of epoch {self.store.held} from sequence id "
                   f"{self.c.core.group.next_seq}")
        await startup.go_live(self.c)

    def _renewed(self, epoch: int) -> None:
        self.c.log(f"silent past half its lease, renewed as the primary of epoch {epoch}")
        self._publish_primary()  # senders on this machine read the newest epoch file

    def _publish_primary(self) -> None:
        """An epoch file in the instance's directory, for senders on this machine."""
        e = self.store.held
        assert e is not None
        make_dirs(self.shared_dir)
        # Where the claim is in the log too: callers here start reading there.
        info = {**self._info(), "epoch": e, "log_key": self.store.name,
                "claim_index": self.store.view.claim_index}
        replace_durably(self.shared_dir / f"{EPOCH_PREFIX}{e}", json.dumps(info).encode())

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_every)
            if self.store.silent_for() >= self.heartbeat_every:
                await self.store.heartbeat()

    # ------------------------------------------------------------------ following
    async def _follow_cluster(self) -> None:
        await self.store.catch_up()
        recs = [decode_record(r, ev.index) for ev in self.store.drain_events()
                if isinstance(ev, Records) for r in ev.records]
        if self.role == "primary" and self.c.core.phase is Phase.LIVE:
            return  # its own records, delivered by the committer
        if self.loaded is None:
            self.backlog += recs
            end = self.store.view.newest_checkpoint()
            if end is None:
                return
            await self._load(end.number, await self.store.read_checkpoint(end))
            recs, self.backlog = self.backlog, []
        recs = [r for r in recs if r.seq_id >= self.c.core.group.next_seq]
        for r in recs:
            if r.seq_id != self.c.core.group.next_seq:
                raise LogCorruptionError("raft log", 0, f"record {r.seq_id} where "
                                         f"{self.c.core.group.next_seq} was due")
            deliver_records(self.c, [r])
        if recs:
            assert self.c.send is not None
            await self.c.send.drain()

    async def _load(self, number: int, data: bytes) -> None:
        """Start from a checkpoint of the cluster (its check bytes verified twice: the
        cluster's, then the file's own)."""
        assert self.c.send is not None
        make_dirs(self.c.dir)
        path = checkpoint_path(self.c.dir, max(1, number))
        await asyncio.to_thread(replace_durably, path, data)
        cf = CheckpointFile(path)
        next_seq, inputs, outs = read_state(cf)
        self.c.core.checkpoint_loaded(next_seq, inputs, outs)
        actions.run(self.c)  # the links its outputs name
        write_unless_closing(self.c.send, encode_checkpoint_record(self.c.cid, cf.size))
        for chunk in cf.chunks():
            write_unless_closing(self.c.send, chunk)
        await self.c.send.drain()
        self.loaded = next_seq
        self.c.log_n = max(1, number)
        self.c.log(f"loaded checkpoint {number} from the cluster")

    async def _checkpoint_here(self) -> None:
        n = self.c.core.group.next_seq
        got = await checkpoints.collect(self.c, n, TakeCheckpoint())
        await checkpoints.save(self.c, self.c.dir, n, got.data, got.position)
        raw = await asyncio.to_thread(checkpoint_path(self.c.dir, n).read_bytes)
        await self.store.write_checkpoint(n, [raw])
        self.c.log(f"wrote checkpoint {n} to the cluster")
        self.loaded = n
        await checkpoints.remove_unkept(self.c)
