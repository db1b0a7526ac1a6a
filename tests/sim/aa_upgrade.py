"""A replica set's live upgrade in the simulation: the real steps of
``replication.upgrade_steps`` taken one world step each, over the simulated disks of
both versions, with crashes, pauses past the lease, other replicas' claims and
takeovers, and standbys of the old version free to come between any two.

The replica set ``i0`` has a real registration file (``upgrade``'s pieces), read by the
real ``registry.load`` whenever a replica asks what version the instance runs. While it
runs, its operator may register an upgrade to version 1 (``RoundsV2``) and start one
more replica for it: the upgrader. It follows with the old code, claims the old
directory's next epoch, and runs ``upgrade_replica``; killed, it is started again and
retries, until the registration names version 1. A replica started once the
registration names version 1 runs version 1, in its directory, from its newest
checkpoint; one of version 0 leaves once the old directory is marked upgraded, or stops
once its claim won and the registration names version 1 (``standby_takes_over``).

Checked: no replica of version 0 holds the old directory's newest epoch and is live
once the registration names version 1 (a second primary), and no two replicas write in
one epoch of one directory (``World.wrote``); version 1's checkpoint holds the old state
converted once (a replay of version 0's log by the old class, through
``RoundsV2.upgrade_from``); at the end the upgrade is done, the instance's state was
converted exactly once, version 1's directory holds no temporary checkpoint, and its
state is a replay of what that directory keeps (``World.check_replay``: nothing a killed
attempt left is read), with every call delivered once and in order across the upgrade
(the world's own checks).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs
from ambrosia_ic import registry
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.errors import LockLostError
from ambrosia_ic.logstore import checkpoint_path, log_path, remove_uncommitted_version
from ambrosia_ic.registry.registration import Registration
from ambrosia_ic.replication import upgrade_steps as up

from ambrosia_core.wire import UpgradeTakeCheckpoint, encode_checkpoint_record

from .app import Rounds, RoundsV2
from .disk import SavedCheckpoint, SimDisk, SimEpochs
from .upgrade import converted, registry_home, write_registration
from .world import ReplicaNode, Step

if TYPE_CHECKING:
    from .world import World

__all__ = ["NewVersionReplica", "ReplicaUpgrades", "UpgraderNode"]

NAME = "i0"  # the replica set
# A pause past the lease between the upgrader's last look at both epochs and its write
# of the registration lets a standby of the old version claim, read the registration
# before that write, and take over: two primaries, one of each version (nothing orders
# the registration's write after the old directory's epochs). Off, so that the seeds
# pass; ``test_aa_upgrade`` turns it on and shows the simulation finds it.
PAUSE_BEFORE_COMMIT = False


class ReplicaUpgrades:
    """The replica set's registration and live upgrade: a part of ``World``
    (``World.extras``)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.home = registry_home(world)
        self.old = world.disks[NAME]
        self.new: SimDisk | None = None  # version 1's directory, once registered
        self.upgrader: str | None = None  # the upgrader's node id, once registered
        self.marked = False  # the old directory's ``serverupgraded``
        self.reg = Registration(instance_name=NAME, receive_port=2000, send_port=2001,
                                ic_port=2002, log_dir=str(world.root),
                                committer_id=world.cid[NAME], keep_checkpoints=world.keep)
        write_registration(self.home, self.reg)

    @property
    def committed(self) -> bool:
        return self.reg.current_version == 1

    def registered(self, name: str) -> int:
        """What the real registry reads in the registration's file."""
        return registry.load(name, self.home).current_version

    def commit(self) -> None:
        """``registry.set_versions``: the instance runs version 1 from now on."""
        assert self.new is not None
        self.reg = registry.set_versions(NAME, 1, 1, self.home)
        self.world.disks[NAME] = self.new
        self.world.apps[NAME] = (RoundsV2, None)
        self.world.counts["aa committed"] += 1

    # -- the world's hooks
    def replica(self, node_id: str) -> ReplicaNode:
        """The replica started as ``node_id``: of the version the registration names,
        or the upgrader while the upgrade is not done."""
        if self.committed:
            return NewVersionReplica(self.world, NAME, node_id)
        if node_id == self.upgrader:
            return UpgraderNode(self.world, node_id, self)
        return ReplicaNode(self.world, NAME, node_id)

    def steps(self, faults: bool) -> list[Step]:
        w = self.world
        out: list[Step] = []
        members = w.members(NAME)
        if self.upgrader is None:
            if w.serving(NAME) is not None:  # soon after it went live, amid the faults
                out.append(("register-aa-upgrade", NAME))
            return out
        old_holder = self.old.epochs.get(self.old.newest_epoch())
        old_gone = True
        for node_id in members:
            node = w.nodes[node_id]
            if not isinstance(node, ReplicaNode):
                continue
            if node.epochs is old_holder and not node.paused:
                old_gone = False
            if isinstance(node, UpgraderNode) and node.taking is not None and faults \
                    and not node.paused:
                # Between two of its steps: a pause past the lease, or the process
                # killed (its own kind, so that it comes as often as any other fault).
                if PAUSE_BEFORE_COMMIT or not isinstance(node.last, up.CheckEpochs):
                    out.append(("pause", node_id))
                out.append(("aa-crash", node_id))
                if node.flow:
                    out.append(("aa-crash", node_id, 0.5))  # its checkpoint's write cut
        for node_id in members:
            node = w.nodes[node_id]
            if not isinstance(node, ReplicaNode) or node.disk is not self.old \
                    or isinstance(node, UpgraderNode) or node.paused:
                continue
            if self.committed and node.epochs is old_holder \
                    and node.core.phase is Phase.LIVE:
                w.fail(f"{node_id} is a live primary of version 0, holding the old "
                       f"directory's newest epoch, though the registration names version 1")
            if self.marked and node.taking is None:
                out.append(("aa-exit", node_id))  # it sees ``serverupgraded``
            elif self.committed and old_gone and node.can_claim(True):
                out.append(("claim", node_id))  # the old directory's holder is gone
        return out

    def do(self, step: Step) -> bool:
        kind = step[0]
        w = self.world
        if kind == "register-aa-upgrade":
            self.reg = attrs.evolve(self.reg, upgrade_version=1)
            write_registration(self.home, self.reg)
            w.apps[NAME] = (Rounds, RoundsV2)
            self.new = SimDisk(w.root, f"{NAME}_1")
            self.new.app = RoundsV2
            members = w.members(NAME)
            self.upgrader = f"{NAME}/{len(members)}"  # ``add-replica -r K -uv 1``
            members.append(self.upgrader)
            w.nodes[self.upgrader] = self.replica(self.upgrader)
        elif kind == "aa-crash":
            w.counts["aa crash"] += 1
            w._crash(step[1], step[2] if len(step) > 2 else None)
        elif kind == "aa-exit":
            w.counts["aa exit"] += 1
            w._stop(step[1])  # ``_follow``'s CoordinatorError: the process ends
        else:
            return False
        return True

    def check_end(self) -> None:
        w = self.world
        if self.upgrader is None:
            return
        if not self.committed:
            w.fail(f"{NAME} ended registered for an upgrade to version 1 that was never done")
            return
        assert self.new is not None
        left = self.new.temporaries()
        if left:
            w.fail(f"{NAME}'s version 1 directory was left with {', '.join(left)}")
        node = w.serving(NAME)
        state = node.observed() if node is not None else None
        if state is None or state.get("upgrades") != 1:
            w.fail(f"{NAME} runs version 1 with "
                   f"{None if state is None else state.get('upgrades')} conversions of "
                   "its state, expected 1")


class NewVersionReplica(ReplicaNode):
    """A replica started once the registration names version 1: it follows version 1's
    directory from its newest checkpoint (``shared_dir._load_checkpoint``)."""

    def __init__(self, world: World, name: str, node_id: str) -> None:
        super().__init__(world, name, node_id)
        self.version = 1

    def _load_checkpoint(self) -> None:
        n = max(self.disk.checkpoints)  # the upgrade's: the primary writes no other
        saved = self.disk.checkpoints[n]
        self.core.checkpoint_loaded(saved.next_seq, saved.inputs, saved.outputs)
        self.deliver(encode_checkpoint_record(self.core.cid, sum(map(len, saved.chunks)))
                     + b"".join(saved.chunks))
        self.tail = (n, 0, saved.next_seq)
        self.run_actions()


class UpgraderNode(ReplicaNode):
    """The replica registered for the upgrade (``SharedDirReplica`` as the upgrader):
    it follows with the old code, claims the old directory's next epoch once caught up,
    and takes ``upgrade_steps.upgrade_replica``'s steps one world step each."""

    def __init__(self, world: World, node_id: str, ups: ReplicaUpgrades) -> None:
        self.ups = ups
        self.new_epochs: SimEpochs | None = None
        self.waiting: int | None = None  # the upgrade checkpoint asked for
        self.last: up.UpgradeStep | None = None  # its last step taken
        self.upgrade_n = 0  # the first log of version 1 it writes
        super().__init__(world, NAME, node_id)

    def _start(self) -> None:
        self.core.set_phase(Phase.FOLLOWING)  # never a first start: it upgrades

    def can_claim(self, holder_gone: bool) -> bool:
        """Once caught up (``_follow``'s claim with ``upgrade_to``), holder or not."""
        return (self.core.phase is Phase.FOLLOWING and not self.paused
                and self.taking is None and self.tail is not None and not self.can_follow())

    def claim(self) -> None:
        if not self.epochs.claim(self.epochs.current() + 1):
            return
        self.role = "upgrader"
        self.world.counts["aa upgrade begun"] += 1
        self.taking = up.upgrade_replica(0, 1)
        self.take_over()

    def can_take_over(self) -> bool:
        return self.taking is not None and (self.waiting is None
                                            or self.waiting in self.received)

    def beat(self) -> None:
        super().beat()
        if self.new_epochs is not None:
            self.new_epochs.check()

    def _take(self, step: up.UpgradeStep) -> None:
        ups, new = self.ups, self.ups.new
        assert new is not None
        self.last = step
        if isinstance(step, up.TakeUpgradeCheckpoint):
            self.core.ask_checkpoint(step.n, UpgradeTakeCheckpoint())
            self.waiting = self.upgrade_n = step.n
            self.run_actions()
        elif isinstance(step, up.CheckOldEpoch):
            self.epochs.check()
        elif isinstance(step, up.ClaimNewEpoch):
            self.new_epochs = SimEpochs(new)
            self._taken = self.new_epochs.claim(new.newest_epoch() + 1)
        elif isinstance(step, up.RemoveUncommitted):
            remove_uncommitted_version(new.dir)
            new.logs = {k: log for k, log in new.logs.items() if log.path.exists()}
            new.checkpoints.clear()
            new.seals.clear()
            new.unsynced &= new.logs.keys()
        elif isinstance(step, up.OpenNewLog):
            self.epochs.check()  # ``FencedSink.next_log``, still fenced by the old epochs
            if step.n in new.logs:
                raise LockLostError(f"log {step.n} of version 1 was created by another "
                                    "replica")
            self.disk = new  # what it writes from here on, and what a crash cuts
            self.writer = new.open_log(step.n)
            new.sync_dir()
            self.log_n, self.flow = step.n, "upgrade"  # a crash leaves its checkpoint's temp
        elif isinstance(step, up.SaveNewCheckpoint):
            self._save(step.n)
        elif isinstance(step, up.CheckEpochs):
            assert self.new_epochs is not None
            self.epochs.check()
            self.new_epochs.check()
        elif isinstance(step, up.Commit):
            assert self.new_epochs is not None
            self._check_commit(new)
            self.epochs = self.new_epochs
            self.sink.epochs = self.new_epochs  # type: ignore[attr-defined]
            self.version = 1
            ups.commit()
        elif isinstance(step, up.MarkUpgraded):
            ups.marked = True
        elif isinstance(step, up.GoLiveUpgraded):
            self.disk = new
            self.log_n = step.n
            self.recovered = True
            self.world.counts["aa upgraded"] += 1
            self._go_live()  # checked: its state is a replay of version 1's directory
        else:
            super()._take(step)

    def _check_commit(self, new: SimDisk) -> None:
        """As the registration is about to name version 1, version 1's directory holds
        this attempt's log and its durable checkpoint, and nothing else: what killed
        attempts left would be read as version 1's, and a commit before the checkpoint
        leaves version 1 with nothing to start from if the upgrader dies."""
        n = self.upgrade_n
        want = [checkpoint_path(new.dir, n).name, log_path(new.dir, n).name]
        found = sorted(os.listdir(new.dir))
        if found != want:
            self.world.fail(f"{self.id} commits the upgrade with {found} in version 1's "
                            f"directory, expected {want}")

    def _save(self, n: int) -> None:
        """Checkpoint ``n`` of version 1: the old state, converted once. (What the
        checkpoint holds, read by a fresh binding: the binding may have run self-calls
        since it took it, which the log holds only later.)"""
        message, chunks, outputs = self.received.pop(n)
        self.waiting, self.flow = None, ""
        core = self.core
        saved = SavedCheckpoint(core.group.next_seq, dict(core.group.inputs), outputs, chunks)
        held = self.world.replays.state(NAME, RoundsV2, core.cid, saved, [])
        want = converted(self.world, NAME, self.ups.old)
        if want is not None and held is not None and held["round"] > want["round"]:
            # A round the old primary's binding started by a self-call whose record
            # landed past the seal: the checkpoint carries it unlogged, and the binding,
            # primary once asked for this checkpoint, ran it first (the log holds it
            # only from log ``n`` on; the end's replay and exactly-once checks see it).
            want = {**want, "round": held["round"]}
        if held != want:
            self.world.fail(f"{self.id}'s checkpoint of version 1 holds {held}, but its old "
                            f"log through the new code gives {want}")
        self.disk.save_checkpoint(n, saved, message)
