"""The checkpointing secondary of an active/active instance in the simulation
(``replication.shared_dir``'s role of that name): a replica that follows the log and,
each time a log file is complete, asks its binding for a checkpoint and writes it as the
state at the start of the next log. It never claims an epoch.

Every replica of an instance that has one tries its lock as it starts (the first to find
it free holds it until its process is gone); the others are standbys. What it does
after each look at the log is the real decision (``replication.checkpointer.next_move``);
its looks find at most ``LOOK`` records, as a look that comes while the primary writes
finds part of what is to come. Every replica (not only this one) starts following from
the newest intact checkpoint, read by the real recovery reader, so a checkpoint that is
not the state at the start of its log makes a follower, or a primary that took over,
apply a call twice or not at all.

Once a checkpoint it saves is durable it prunes (``checkpoints.remove_unkept(c,
temps_from=2)``, in a step of its own, ``World.prune``): the real ``FencedSink``'s
``remove_unkept``, which keeps at least the previous checkpoint too (so the first
start's checkpoint 1 and log 1 go once it has saved two or more checkpoints). A
replica loading a checkpoint whose logs were pruned meanwhile looks again, as
``shared_dir._load_checkpoint`` does; a follower reads its log by name at each look
(``LogTail.poll``), and one whose log was pruned under it (a later log exists) stops in
one line and is started again (``ReplicaNode.check_tail``). The seeded runs never leave
a standby that far behind; ``test_simulation`` stalls one to show it.

Checked here, at each checkpoint it saves: its position is the first sequence id of its
log (what log N's committed records end at); after it starts, no temporary file of a
checkpoint it writes (from 2 on) is left.
"""

from __future__ import annotations

from ambrosia_ic import logstore, recovery
from ambrosia_ic.errors import MissingLogError
from ambrosia_ic.logstore import checkpoint_path, log_path
from ambrosia_ic.replication import checkpointer

from ambrosia_core.wire import TakeCheckpoint, encode_checkpoint_record

from .disk import DiskEntry, SavedCheckpoint
from .world import ReplicaNode

__all__ = ["CheckpointingReplica"]

LOOK = 3  # records a look at the log finds at most


class CheckpointingReplica(ReplicaNode):
    """A replica of an instance that has a checkpointing secondary: the secondary
    itself, or a standby (``ReplicaNode``) that starts from the secondary's
    checkpoints."""

    def _start(self) -> None:
        super()._start()
        if self.role == "primary":
            return
        holder = self.disk.checkpointer
        if holder is None or self.world.nodes.get(holder.id) is not holder:
            self.disk.checkpointer = self  # ``Epochs.try_checkpointer``: its flock
            self.role = "checkpointer"
            # Its lock makes it the only writer of checkpoints after 1 here.
            logstore.remove_checkpoint_temps(self.disk.dir, 2)
            left = [t for t in self.disk.temporaries() if not t.startswith(
                f".{logstore.CHECKPOINT_PREFIX}1.")]
            if left:
                self.world.fail(f"{self.id} holds the checkpointer's lock and left {left}")

    def _poll(self) -> tuple[list[DiskEntry], tuple[int, int, int] | None]:
        """A look finds at most ``LOOK`` records (log ``n`` is then read on)."""
        recs, tail = super()._poll()
        if self.tail is None or len(recs) <= LOOK:
            return recs, tail
        recs = recs[:LOOK]
        return recs, (self.tail[0], recs[-1].end, recs[-1].seq + 1)

    def can_claim(self, holder_gone: bool) -> bool:
        return self.role != "checkpointer" and super().can_claim(holder_gone)

    def _move(self, n: int, tail: tuple[int, int, int] | None) -> checkpointer.Move:
        d = self.disk.dir
        return checkpointer.next_move(tail is not None and tail[0] == n + 1,
                                      checkpoint_path(d, n + 1).exists(),
                                      log_path(d, n + 1).exists())

    def can_follow(self) -> bool:
        if self.role == "checkpointer" and (self.asked is not None or self.pruning):
            return False  # its binding's checkpoint is being taken, saved and pruned after
        if not super().can_follow():
            return False
        if self.role != "checkpointer" or self.tail is None:
            return True
        recs, tail = self._poll()
        return bool(recs) or self._move(self.tail[0], tail) is not checkpointer.Move.WAIT

    def follow(self) -> None:
        if self.role != "checkpointer" or self.tail is None:
            super().follow()
            return
        n, _, _ = self.tail
        self.check_tail()
        recs, tail = self._poll()
        for r in recs:
            self.deliver(r.wire)
            self.core.followed(r.seq, r.inputs)
        if recs:
            self.core.caught_up()
        move = self._move(n, tail)
        if move is checkpointer.Move.WAIT:
            assert self.tail is not None
            if recs:  # at the seal: it reads on once log n + 1 exists
                self.tail = (n, recs[-1].end, recs[-1].seq + 1)
            return
        self.tail = tail
        if move is checkpointer.Move.CHECKPOINT:
            self.asked = n + 1
            self.core.ask_checkpoint(n + 1, TakeCheckpoint())
            self.run_actions()

    def _save_switch(self, position: tuple[int, dict[str, int]]) -> None:
        if self.role != "checkpointer":
            super()._save_switch(position)
            return
        assert self.asked is not None
        n = self.asked
        self.asked = None
        message, chunks, outputs = self.received.pop(n)
        # ``checkpoints.save`` with the position the checkpoint was asked at.
        next_seq, inputs = position
        ends = [r.seq + 1 for k in sorted(self.disk.logs) if k < n
                for r in self.disk.logs[k].records()
                if k not in self.disk.seals or r.end <= self.disk.seals[k]]
        if ends and ends[-1] != next_seq:
            self.world.fail(f"{self.id} saved checkpoint {n} at sequence id {next_seq}, but "
                            f"log {n - 1} ends at {ends[-1] - 1}: the checkpoint is not "
                            f"the state at the start of log {n}")
        self.disk.save_checkpoint(n, SavedCheckpoint(next_seq, inputs, outputs, chunks),
                                  message)
        self.pruning = "secondary"  # ``checkpoints.remove_unkept(c, temps_from=2)``

    def after_pruning(self) -> None:
        if self.pruning == "secondary":
            self.pruning = ""
            self.world.counts["secondary"] += 1
            return
        super().after_pruning()

    def _load_checkpoint(self) -> None:
        """``shared_dir._load_checkpoint``: the newest intact checkpoint, with every
        log from it on, read by the recovery reader."""
        d = self.disk.dir
        found = recovery.newest_intact_checkpoint(d)
        assert found is not None
        c, cf, damaged = found
        try:
            recovery.check_log_chain(d, c)
        except MissingLogError:
            if (recovery.latest_checkpoint(d) or 0) > c:  # pruned meanwhile: look again
                self.world.counts["load again"] += 1
                return
            raise
        self.damaged.update(n for n, _ in damaged)
        next_seq, inputs, outputs = recovery.read_state(cf)
        self.core.checkpoint_loaded(next_seq, inputs, outputs)
        self.deliver(encode_checkpoint_record(self.core.cid, cf.size)
                     + b"".join(cf.chunks()))
        self.tail = (c, 0, next_seq)
        if c > 1:
            self.world.counts["from secondary"] += 1
        self.run_actions()
