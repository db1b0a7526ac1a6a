"""Start-up flows of a standalone coordinator: a first start, a recovery, and a live
upgrade (a recovery with the old code, then the new version's first checkpoint); and
going live, which every flow ends with (active/active replicas too).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from ambrosia_core.durable import fsync_dir, make_dirs
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.wire import (
    TakeBecomingPrimaryCheckpoint,
    UpgradeTakeCheckpoint,
    encode_checkpoint_record,
)

from .. import registry
from ..logstore import (
    DIGEST_PREFIX,
    DigestWriter,
    InstanceLock,
    LogWriter,
    digest_path,
    file_numbers,
    log_path,
    read_digest,
    remove_checkpoint_temps,
    remove_first_start_leftovers,
)
from ..recovery import (
    RecoveryPlan,
    check_no_orphan_logs,
    replay_wire,
)
from . import actions, checkpoints, commit
from .phase import Phase
from .start_plan import choose_start, choose_upgrade

if TYPE_CHECKING:
    from .lifecycle import Coordinator

__all__ = ["choose_flow", "first_start", "go_live", "start"]


def choose_flow(c: Coordinator) -> RecoveryPlan | None:
    """The recovery plan, or None for a first start (``start_plan.choose_start``
    decides; this carries out its cut and says its lines).

    Raises:
        CoordinatorError: ``--create-service`` forbids the flow the directory needs, or
            the directory cannot be started from as it is.
    """
    if c.reg.upgrading:
        _prepare_upgrade(c)
    chosen = choose_start(c.dir, c.cid, name=c.name,
                          started=registry.has_started(c.name, c.home),
                          mode=c.reg.create_service)
    for line in chosen.lines:
        c.log(line)
    c.damaged = set(chosen.damaged)
    if chosen.cut is not None:
        path, offset = chosen.cut
        LogWriter(path, truncate_at=offset).close()
    # The directory's lock is held and the flow chosen: no live writer is left of
    # whatever a killed one was writing. (Here, before the flow's task starts: an
    # await at its start let a binding that dies at once end the first start before
    # it saved checkpoint 1.)
    checkpoints.say_removed(c, remove_checkpoint_temps(c.dir))
    return chosen.plan


def _prepare_upgrade(c: Coordinator) -> None:
    """Carry out ``start_plan.choose_upgrade``: finish, start afresh or retry the
    standalone live upgrade the registration asks for."""
    m = c.reg.upgrade_version
    chosen = choose_upgrade(c.dir, registry.instance_dir(c.reg, m), c.cid, m, name=c.name,
                            started=registry.has_started(c.name, c.home))
    if chosen.kind == "finished":
        _move_to_version(c, m)
        c.log(f"the upgrade to version {m} had finished; running version {m}")
        return
    for path in chosen.remove:
        path.unlink()
    if chosen.kind == "afresh":
        _move_to_version(c, m)
        return
    c.upgrade_to = m


def _move_to_version(c: Coordinator, m: int) -> None:
    c.reg = registry.set_versions(c.name, m, m, c.home)
    c.lock.release()
    c.dir = registry.instance_dir(c.reg)
    make_dirs(c.dir)
    c.lock = InstanceLock(c.dir)
    c.lock.acquire()


async def start(c: Coordinator, plan: RecoveryPlan | None) -> None:
    if plan is None:
        # Nothing of a first start may reach another instance before its record 0
        # is durable: until then a restart does the first start again.
        c.links_active = False
        await first_start(c)
    else:
        await _recover(c, plan)
    await go_live(c)


async def go_live(c: Coordinator) -> None:
    """Links may connect, the committer runs, and other instances may call in. From here
    on the instance has a history: an empty log directory is never a first start again."""
    if not registry.has_started(c.name, c.home):  # once in the instance's life
        await asyncio.to_thread(registry.mark_started, c.name, c.home)
    c.core.set_phase(Phase.LIVE)
    if not c.links_active:
        c.links_active = True
        for link in c.links.values():
            link.start()
    c.spawn(commit.committer(c))
    await c.link_server.open()
    c.wake.set()


async def first_start(c: Coordinator) -> None:
    """Checkpoint 1, log 1, then the InitialMessage as record 0, durably, before
    anything else happens: until record 0 is on disk the next start is a first
    start again (``recovery.interrupted_first_start``)."""
    check_no_orphan_logs(c.dir)  # never start afresh over a history that happened
    remove_first_start_leftovers(c.dir)
    c.initial = asyncio.get_running_loop().create_future()
    fut = checkpoints.wait_for(c)
    c.core.begin_first_start()
    actions.run(c)
    assert c.send is not None
    await c.send.drain()
    initial = await c.initial
    got = await fut
    await checkpoints.save(c, c.dir, 1, got.data, got.position)
    c.writer = c.sink.open_log(log_path(c.dir, 1))
    c.log_n = 1
    await asyncio.to_thread(fsync_dir, c.dir)
    # The InitialMessage, echoed whole, is the first data record (with the self-calls
    # the binding made while starting, as the committer would batch them).
    c.core.first_record(initial)
    await commit.commit_batch(c)


async def _recover(c: Coordinator, plan: RecoveryPlan) -> None:
    c.core.begin_recovery(plan.start_seq, plan.next_seq, plan.inputs, plan.outputs)
    c.stats.replay_first, c.stats.replay_end = plan.start_seq, plan.next_seq
    actions.run(c)  # the links its outputs name
    for k in file_numbers(c.dir, DIGEST_PREFIX):  # digests of checkpoints never made
        if k > plan.number:
            (c.dir / f"{DIGEST_PREFIX}{k}").unlink()
    dpath = digest_path(c.dir, plan.number)
    skip = len(read_digest(dpath))
    c.set_digest(DigestWriter(dpath, keep=skip), skip)
    send = c.send
    assert send is not None
    write_unless_closing(send, encode_checkpoint_record(c.cid, plan.checkpoint.size))
    for chunk in plan.checkpoint.chunks():
        write_unless_closing(send, chunk)
        await send.drain()
    # Replayed records go out about 1 MiB per write (a write per record costs the
    # transport a send() call each time its buffer has just drained), cut from the
    # spans the plan's scan found: the logs are checked and parsed once per recovery.
    for wire, last in replay_wire(plan):
        write_unless_closing(send, wire)
        c.core.replayed(last)
        await send.drain()
    new_n = plan.last_log + 1
    if c.upgrade_to is not None:
        await _upgrade(c, new_n)
        return
    got = await checkpoints.collect(c, new_n, TakeBecomingPrimaryCheckpoint())
    await _open_log_before_checkpoint(c, c.dir, new_n)
    await checkpoints.save(c, c.dir, new_n, got.data, got.position)
    await checkpoints.remove_unkept(c, temps_from=1)


async def _open_log_before_checkpoint(c: Coordinator, d: Path, n: int) -> None:
    """Create log ``n`` of ``d`` and sync its directory entry: checkpoint ``n`` is written
    only once its log exists for sure, so a checkpoint without its log is damage,
    never the trace of a crash."""
    c.writer = await asyncio.to_thread(c.sink.next_log, d, n)
    c.log_n = n


async def _upgrade(c: Coordinator, new_n: int) -> None:
    """Recovery with the old code is complete: switch to version M.

    Version N's files stay as they are; version M's directory gets log ``new_n``
    and then checkpoint ``new_n`` (numbers go on from N's logs, as do sequence ids).
    Until that checkpoint is durable nothing in M's directory counts, so a binding
    that dies first leaves the upgrade to be retried from version N (a log without
    its checkpoint there is removed then: ``_prepare_upgrade``).
    """
    m = c.upgrade_to
    assert m is not None
    c.core.set_phase(Phase.UPGRADING)
    old_version = c.reg.current_version
    new_dir = registry.instance_dir(c.reg, m)
    make_dirs(new_dir)
    c.new_lock = InstanceLock(new_dir)
    c.new_lock.acquire()
    c.set_digest(None)
    c.dir = new_dir  # the new version's digest starts with its checkpoint
    got = await checkpoints.collect(c, new_n, UpgradeTakeCheckpoint())
    await _open_log_before_checkpoint(c, new_dir, new_n)
    await checkpoints.save(c, new_dir, new_n, got.data, got.position)
    c.reg = registry.set_versions(c.name, m, m, c.home)
    c.upgrade_to = None
    c.log(f"upgraded from version {old_version} to version {m}")
