"""Active/active: one replica (binding + coordinator) of an instance whose replicas
share one directory of logs and checkpoints.

Roles:

- primary: holds the newest epoch (``lease.py``), is the only writer of the log, and
  never checkpoints except at the instance's very first start. It starts a new log
  file when the log reaches the trigger size or its binding asks for a checkpoint.
- checkpointing secondary: the first replica to find ``servercheckpointer`` free. It
  follows the log and, each time a log file is complete (the primary moved on to the
  next one, or a takeover sealed it), asks its binding for a checkpoint and writes it
  as ``serverchkpt<N+1>``, the state at the start of log N+1. Never becomes primary.
- standby: follows the log (its binding stays recovering) and claims the next epoch
  when the primary's flock is free or its lease ran out.
- upgrader: a replica registered with an upgrade version above the instance's current
  version. It follows with the old code until it has caught up, then claims the next
  epoch (which stops the primary) and upgrades (``upgrade_steps``). If it dies before
  the commit, a standby takes over with the old version.

Followers deliver only committed records. A record is committed when its log is
sealed (``serverseal<N>``) and it lies before the seal; or when its log is followed by
a newer one and has no seal (the writer moved on by itself); or, in the newest log,
when the epoch it carries is still the newest epoch after it was read: a takeover
claims its epoch first and seals after, so such a record was written before the
claim and lies inside any later seal. A takeover: claim E+1, seal the newest log at
its last whole record, deliver the rest up to the seal, send BecomingPrimary, start
the next log file (created exclusively), listen for links.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

from ambrosia_core.durable import make_dirs
from ambrosia_core.errors import CoordinatorError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.wire import (
    TakeCheckpoint,
    UpgradeTakeCheckpoint,
    encode_checkpoint_record,
)
from ambrosia_ic.errors import MissingLogError

from .. import registry
from ..coordinator import LinkOptions, actions, checkpoints, process, startup
from ..coordinator.directory import DirectoryFactory
from ..coordinator.phase import Phase
from ..coordinator.sink import FencedSink
from ..lease import HEARTBEAT, Epochs, read_epoch
from ..logstore import (
    LOG_PREFIX,
    DiskRecord,
    LogScan,
    checkpoint_path,
    file_numbers,
    log_path,
    read_seal,
    remove_uncommitted_version,
    write_seal,
)
from ..recovery import (
    check_log_chain,
    first_start_pending,
    interrupted_first_start,
    latest_checkpoint,
    newest_intact_checkpoint,
    read_state,
)
from . import checkpointer
from . import upgrade_steps as up
from .common import claim_info, deliver_records, notify_superseded, replica_coordinator
from .log_tail import LogTail, committed_prefix
from .takeover import (
    FirstStart,
    FollowTo,
    GoLive,
    LoadCheckpoint,
    NewestLog,
    OpenLog,
    ReadSeal,
    WholeEnd,
    WriteSeal,
)

__all__ = ["LogTail", "SharedDirReplica", "committed_prefix"]

POLL = 0.005  # seconds between looks at the shared directory while following
# An upgrader claims the epoch once a look at the log finds at most this many new
# records. Waiting for a look that finds none could wait forever under steady load
# (records keep arriving while the last ones are delivered); the claim seals the log
# and the upgrader reads up to the seal anyway, so this only bounds the pause.
CAUGHT_UP_RECORDS = 64


class SharedDirReplica:
    """Replica ``replica`` of an active/active instance whose replicas share its
    directory: a coordinator (``c``) with a fenced log sink, and the roles above as its
    start-up flow."""

    def __init__(self, reg: registry.Registration, home: Path, *, replica: int = 0,
                 stdout: TextIO | None = None, stderr: TextIO | None = None,
                 fsync_in_thread: bool | None = None, link: LinkOptions | None = None,
                 directory: DirectoryFactory | None = None) -> None:
        self.fenced = FencedSink(Epochs(registry.instance_dir(reg)))
        self.c, self.replica = replica_coordinator(
            reg, home, replica, self.fenced, stdout=stdout, stderr=stderr,
            fsync_in_thread=fsync_in_thread, link=link, directory=directory)
        self.number = replica
        self.role = "starting"
        self.tail: LogTail | None = None
        self.upgrading_to = (self.replica.upgrade_version
                             if self.replica.upgrade_version > reg.current_version else None)
        self._new_epochs: Epochs | None = None  # an upgrader's, in the new version's dir
        self._old_epochs: Epochs | None = None  # an upgrader's, once it committed
        self._upgrade_got: checkpoints.CheckpointReceived | None = None
        self.fenced_by: int | None = None  # the newer epoch that fenced this replica off
        self.c.on_shutdown = self._on_shutdown

    @property
    def epochs(self) -> Epochs:
        """The epochs of the directory this replica writes (or would)."""
        return self.fenced.epochs

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        make_dirs(self.c.dir)
        try:
            # The link port is reserved with the others: a busy one must stop this
            # replica before it claims an epoch or writes anything.
            code, message = await process.serve(
                self.c, f"replica={self.number} receive={self.c.receive_port} "
                      f"send={self.c.send_port} ic={self.c.ic_port}", lambda: self._main)
        finally:
            self.epochs.close()
            if self._new_epochs is not None:
                self._new_epochs.close()
        if self.fenced_by is not None:
            self.c.log(f"fenced by epoch {self.fenced_by}, rejoining as a standby")
        elif message:
            self.c.log(message)
        return code

    def _on_shutdown(self) -> None:
        """As ``RaftReplica._on_shutdown``: a primary fenced off tells its binding (not
        by an upgrader's claim: the old version's replicas stop)."""
        held = self.epochs.held
        if self.c.stopping and held is not None and self.upgrading_to is None and (
                newest := self.epochs.current()) > held and "upgrade_to" not in read_epoch(
                    self.epochs.dir, newest):
            self.fenced_by = newest
            notify_superseded(self.c)

    def _info(self, **extra: Any) -> dict[str, Any]:
        return claim_info(self.c, self.number, **extra)

    async def _main(self) -> None:
        if (self.upgrading_to is None and first_start_pending(self.c.dir, self.c.cid)
                and self.epochs.current() == 0 and self.epochs.claim(1, self._info())):
            self.role = "primary"
            self.c.log("first start: primary of epoch 1")
            self.c.spawn(self._heartbeat())
            await startup.first_start(self.c)
            await startup.go_live(self.c)
            return
        if self.upgrading_to is not None:
            self.role = "upgrader"
        elif self.epochs.try_checkpointer():
            self.role = "checkpointer"
            # Its lock makes it the only writer of checkpoints after 1 here.
            await checkpoints.remove_stale_temps(self.c, first=2)
        else:
            self.role = "standby"
        self.c.core.set_phase(Phase.FOLLOWING)
        self.c.log(f"following the log as the {self.role}")
        await self._follow()

    # ------------------------------------------------------------------ following
    async def _follow(self) -> None:
        while True:
            if self.tail is None and latest_checkpoint(self.c.dir) is not None:
                with contextlib.suppress(FileNotFoundError):
                    await self._load_checkpoint()
            caught_up = False
            if self.tail is not None:
                caught_up = await self._catch_up()
            if self.role != "upgrader" and (m := self.epochs.upgraded_to()) is not None:
                raise CoordinatorError(
                    f"the instance was upgraded to version {m}; this {self.role} of version "
                    f"{self.c.reg.current_version} stops (start replicas of version {m})"
                )
            if self.role == "standby":
                e = self.epochs.current()
                if (e == 0 or self.epochs.holder_gone(e)) and self.epochs.claim(
                        e + 1, self._info()):
                    await self._take_over(e + 1)
                    return
            elif self.role == "upgrader" and caught_up:
                e = self.epochs.current()
                if self.epochs.claim(e + 1, self._info(upgrade_to=self.upgrading_to)):
                    await self._upgrade_replica(e + 1)
                    return
            await asyncio.sleep(POLL)

    async def _load_checkpoint(self) -> None:
        """Start following from the newest intact checkpoint (verified before a byte
        of it reaches the binding), unless it is a first start not yet done."""
        assert self.c.send is not None
        if interrupted_first_start(self.c.dir, self.c.cid):
            return  # the first start's record 0 is not durable yet: nothing to follow
        found = newest_intact_checkpoint(self.c.dir)
        if found is None:
            return
        c, cf, damaged = found
        try:
            check_log_chain(self.c.dir, c)
        except MissingLogError:
            if (latest_checkpoint(self.c.dir) or 0) > c:  # pruned meanwhile: look again
                raise FileNotFoundError(checkpoint_path(self.c.dir, c)) from None
            raise
        for n, err in damaged:
            if n not in self.c.damaged:
                self.c.damaged.add(n)
                self.c.log(f"{err}; following from checkpoint {c} and its logs instead")
        next_seq, inputs, outs = read_state(cf)
        chunks = list(cf.chunks())  # read whole before the checkpointer may delete it
        self.c.core.checkpoint_loaded(next_seq, inputs, outs)
        actions.run(self.c)  # the links its outputs name
        write_unless_closing(self.c.send, encode_checkpoint_record(self.c.cid, cf.size))
        for chunk in chunks:
            write_unless_closing(self.c.send, chunk)
        await self.c.send.drain()
        self.tail = LogTail(self.c.dir, self.c.cid, c, next_seq)
        self.c.log_n = c

    async def _catch_up(self, until: tuple[int, int] | None = None) -> bool:
        """Deliver what is committed; True when (about) nothing more is there right now."""
        tail = self.tail
        assert tail is not None and self.c.send is not None
        while True:
            recs, done = tail.poll(self.epochs.current)
            self._deliver_records(recs)
            await self.c.send.drain()
            if until is not None and (tail.n, tail.offset) >= until:
                return True
            if self.role == "checkpointer":
                move = checkpointer.next_move(
                    done, checkpoint_path(self.c.dir, tail.n + 1).exists(),
                    log_path(self.c.dir, tail.n + 1).exists())
                if move is checkpointer.Move.WAIT:
                    return True
                if move is checkpointer.Move.CHECKPOINT:
                    await self._checkpoint(tail.n + 1)
            if not done:
                if until is None:
                    return len(recs) <= CAUGHT_UP_RECORDS
                if not recs:
                    await asyncio.sleep(POLL)
                continue
            tail.next_log()
            self.c.log_n = tail.n

    def _deliver_records(self, recs: list[DiskRecord]) -> None:
        deliver_records(self.c, recs)

    async def _checkpoint(self, n: int) -> None:
        """The checkpointing secondary: the state at the start of log ``n``."""
        got = await checkpoints.collect(self.c, n, TakeCheckpoint())
        await checkpoints.save(self.c, self.c.dir, n, got.data, got.position)
        await checkpoints.remove_unkept(self.c, temps_from=2)

    # ------------------------------------------------------------------ taking over
    async def _take_over(self, epoch: int) -> None:
        self.role = "primary"
        self.c.spawn(self._heartbeat())
        await self._run(up.standby_takes_over(
            self.tail is not None, self.c.reg.current_version), epoch)

    async def _run(self, steps: Generator[up.UpgradeStep, Any, Any], epoch: int) -> Any:
        """Take a takeover's steps (``takeover``) or a live upgrade's (``upgrade_steps``)
        over the directories; what they return."""
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                return done.value
            answer = None
            d = self.c.dir
            if isinstance(step, NewestLog):
                answer = file_numbers(d, LOG_PREFIX)[-1]
            elif isinstance(step, ReadSeal):
                answer = read_seal(d, step.n)
            elif isinstance(step, WholeEnd):
                scan = LogScan(log_path(d, step.n), allow_torn_tail=True,
                               committer_id=self.c.cid)
                for _ in scan:
                    pass
                answer = scan.good_end
            elif isinstance(step, WriteSeal):
                await asyncio.to_thread(write_seal, d, step.n, step.end)
            elif isinstance(step, FollowTo):
                await self._catch_up(until=(step.n, step.end))
            elif isinstance(step, LoadCheckpoint):
                if latest_checkpoint(d) is not None:
                    await self._load_checkpoint()  # the first start may have finished
                answer = self.tail is not None
            elif isinstance(step, FirstStart):
                self.c.log(f"primary of epoch {epoch}: no checkpoint yet, first start")
                await startup.first_start(self.c)
                await startup.go_live(self.c)
            elif isinstance(step, OpenLog):
                self.c.writer = await asyncio.to_thread(self.c.sink.next_log, d, step.n)
                self.c.log_n = step.n
            elif isinstance(step, up.ReadRegistration):
                answer = registry.load(self.c.name, self.c.home).current_version
            elif not isinstance(step, GoLive):
                answer = await self._upgrade_step(step)
            else:
                self.c.core.become_primary()
                actions.run(self.c)
                self.c.log(f"primary of epoch {epoch}, writing log {step.n} from sequence "
                           f"id {self.c.core.group.next_seq}")
                await startup.go_live(self.c)

    async def _heartbeat(self) -> None:
        while True:
            self.epochs.beat()
            if self._new_epochs is not None:
                self._new_epochs.beat()
            await asyncio.sleep(HEARTBEAT)

    # ------------------------------------------------------------------ live upgrade
    async def _upgrade_replica(self, epoch: int) -> None:
        m = self.upgrading_to
        assert m is not None
        self.role = "primary"
        self.c.spawn(self._heartbeat())
        self.c.log(f"upgrading to version {m}: holding epoch {epoch}")
        await self._run(up.upgrade_replica(self.c.reg.current_version, m), epoch)

    async def _upgrade_step(self, step: up.UpgradeStep) -> Any:
        """One step of ``upgrade_steps.upgrade_replica`` past the old log's seal."""
        m = self.upgrading_to
        assert m is not None
        new_dir = registry.instance_dir(self.c.reg, m)
        if isinstance(step, up.TakeUpgradeCheckpoint):
            self._upgrade_got = await checkpoints.collect(self.c, step.n,
                                                          UpgradeTakeCheckpoint())
        elif isinstance(step, up.CheckOldEpoch):
            self.epochs.check()
        elif isinstance(step, up.ClaimNewEpoch):
            make_dirs(new_dir)
            self._new_epochs = new = Epochs(new_dir)
            return new.claim(new.current() + 1, self._info())
        elif isinstance(step, up.RemoveUncommitted):
            await asyncio.to_thread(remove_uncommitted_version, new_dir)
        elif isinstance(step, up.OpenNewLog):
            self.c.writer = await asyncio.to_thread(self.c.sink.next_log, new_dir, step.n)
        elif isinstance(step, up.SaveNewCheckpoint):
            got = self._upgrade_got
            assert got is not None
            await checkpoints.save(self.c, new_dir, step.n, got.data, got.position)
        elif isinstance(step, up.CheckEpochs):
            assert self._new_epochs is not None
            self.epochs.check()
            self._new_epochs.check()
        elif isinstance(step, up.Commit):
            # From here on this replica writes only in the new version's directory.
            assert self._new_epochs is not None
            self._old_epochs, self.fenced.epochs = self.epochs, self._new_epochs
            self._new_epochs = None
            self.c.dir = new_dir
            self.c.reg = registry.set_versions(self.c.name, m, m, self.c.home)
        elif isinstance(step, up.MarkUpgraded):
            assert self._old_epochs is not None
            self._old_epochs.mark_upgraded(m)
            self._old_epochs.close()
        else:
            assert isinstance(step, up.GoLiveUpgraded)
            self.c.log_n = step.n
            self.c.log(f"upgraded to version {m}; primary of epoch {self.c.sink.epoch} there")
            await startup.go_live(self.c)
        return None
