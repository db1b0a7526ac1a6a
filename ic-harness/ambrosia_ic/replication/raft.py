"""Active/active with the log in a ØMQ RAFT cluster: replicas on different machines, no
shared file system (``register-instance --log-store raft://...``).

The roles and the start-up flow are those of ``shared_dir``, decided as steps with no I/O
(``raft_roles``) that ``RaftReplica`` takes over the cluster and its coordinator; what
they rest on differs:

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
from ambrosia_core.wire import TakeCheckpoint, encode_checkpoint_record
from ambrosia_ic.errors import LockLostError

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
    LogWriter,
    checkpoint_path,
    log_path,
    remove_unkept,
)
from ..logstore.raft_entries import Records
from ..logstore.raft_store import RaftLogStore
from ..raft.errors import RaftError
from ..recovery import read_state
from . import raft_roles as roles
from .common import claim_info, deliver_records, notify_superseded, replica_coordinator
from .raft_roles import decode_record
from .watch import PrimaryWatch

__all__ = ["RaftReplica", "RaftSink", "decode_record"]

RESIGN_TIMEOUT = 2.0


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
    start-up flow (``raft_roles.RaftRoles``' steps, taken by ``_step``)."""

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
        # The decisions of its roles (the checkpointing secondary's turn included).
        self.roles = roles.RaftRoles(replica, reg.lease_ms / 1000,
                                     every=max(16, self.c.core.trigger_bytes // 4096))
        self.lease = reg.lease_ms / 1000
        self.heartbeat_every = self.lease / 5
        self._gone = ""  # why it took over (a takeover's line says it)
        self._took = (0.0, 0.0, 0)  # when its claim began and ended, and the log then
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
        except (RaftError, LockLostError, TimeoutError) as err:
            why = str(err) or f"no answer within {RESIGN_TIMEOUT:g} s"
            self.c.log(f"did not resign epoch {epoch} ({why}): a standby takes over once "
                       "the lease runs out")
            return
        self.c.log(f"resigned epoch {epoch}: a standby takes over without waiting out the lease")

    # ------------------------------------------------------------------ the flow
    async def _main(self) -> None:
        """Run the roles' steps (``raft_roles``) over the cluster and the coordinator."""
        self.raft_sink.loop = asyncio.get_running_loop()
        steps = self.roles.run()
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            answer = await self._step(step)

    async def _step(self, step: roles.RoleStep) -> Any:
        if isinstance(step, roles.Look):
            return await self._look()
        if isinstance(step, roles.Claim):
            claiming = time.monotonic()
            won = await self.store.claim(self._info(), after=step.after,
                                         if_silent=step.if_silent)
            if won:
                self.watch.stop()
                self._took = (claiming, time.monotonic(), self.c.core.group.next_seq)
            return won
        if isinstance(step, roles.FirstStart):
            await self._first_start()
        elif isinstance(step, roles.Standby):
            self.role = "standby"
            self.c.core.set_phase(Phase.FOLLOWING)
            self.c.log(f"following the log in {self.store.address} as a {self.role}")
        elif isinstance(step, roles.LoadCheckpoint):
            return await self._load(step.end.number, await self.store.read_checkpoint(step.end))
        elif isinstance(step, roles.Deliver):
            deliver_records(self.c, step.records)
            assert self.c.send is not None
            await self.c.send.drain()
        elif isinstance(step, roles.Checkpoint):
            await self._checkpoint_here(step.n)
        elif isinstance(step, roles.Wait):
            await self.store.wait(step.seconds)
        elif isinstance(step, roles.TakingOver):
            self.role = "primary"
            self._gone = step.gone
        elif isinstance(step, roles.OpenLog):
            await self._open_log()
        else:
            self.c.core.become_primary()
            actions.run(self.c)
            self.c.log(f"primary of epoch {self.store.held} from sequence id "
                       f"{self.c.core.group.next_seq}")
            await startup.go_live(self.c)
        return None

    async def _look(self) -> roles.Looked:
        """Catch up with the cluster: what the roles' decisions need of it."""
        await self.store.catch_up()
        recs = tuple(decode_record(r, ev.index) for ev in self.store.drain_events()
                     if isinstance(ev, Records) for r in ev.records)
        view = self.store.view
        ended = False
        if self.role == "standby":
            if view.holder.get("replica") != self.number:
                self.watch.follow(view.epoch, view.holder)
            if self.store.stalled_for:
                self.c.log(f"the cluster did not answer for {self.store.stalled_for:.3f} s "
                           "(a leader lost?): the primary's silence counts from its answer")
                self.store.stalled_for = 0.0
        silent = self.store.silent_for()
        if self.role == "standby":
            ended = self.watch.gone == view.epoch and not math.isinf(silent)
        return roles.Looked(view.epoch, view.holder.get("replica"), view.record_count,
                            view.newest_checkpoint(), recs, silent, ended)

    async def _first_start(self) -> None:
        self.role = "primary"
        self.c.log(f"first start: primary of epoch {self.store.held}")
        self._publish_primary()
        self.c.spawn(self._heartbeat())
        self.raft_sink.first_checkpoint = checkpoint_path(self.c.dir, 1)
        await startup.first_start(self.c)
        await startup.go_live(self.c)

    async def _open_log(self) -> None:
        claiming, claimed, before = self._took
        # Where a takeover's time goes, for operators and the failover benchmark.
        self.c.log(f"took over epoch {self.store.held}: {self._gone}, claim "
                   f"{1000 * (claimed - claiming):.1f} ms, log up to the claim "
                   f"{1000 * (time.monotonic() - claimed):.1f} ms "
                   f"({self.c.core.group.next_seq - before} records)")
        self._publish_primary()
        self.c.spawn(self._heartbeat())
        n = self.c.log_n + 1
        self.c.writer = await asyncio.to_thread(self.c.sink.next_log, self.c.dir, n)
        self.c.log_n = n

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

    async def _load(self, number: int, data: bytes) -> int:
        """Start from a checkpoint of the cluster (its check bytes verified twice: the
        cluster's, then the file's own); the sequence id its state starts at."""
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
        self.c.log_n = max(1, number)
        self.c.log(f"loaded checkpoint {number} from the cluster")
        return next_seq

    async def _checkpoint_here(self, n: int) -> None:
        got = await checkpoints.collect(self.c, n, TakeCheckpoint())
        await checkpoints.save(self.c, self.c.dir, n, got.data, got.position)
        raw = await asyncio.to_thread(checkpoint_path(self.c.dir, n).read_bytes)
        await self.store.write_checkpoint(n, [raw])
        self.c.log(f"wrote checkpoint {n} to the cluster")
        await checkpoints.remove_unkept(self.c)
