"""The deterministic simulation of many coordinators (``world``): 10,000 seeded runs of
two or three instances calling each other, one of them often an active/active replica
set (with a checkpointing secondary in half of them: ``secondary``), the others often
upgraded live (``upgrade``), the replica set upgraded live in some (``aa_upgrade``),
with back-pressure pausing their inbound links, through
crashes (unsynced writes lost, a log whose directory entry was not synced lost, a write
in progress cut short, a checkpoint being written left as its temporary file, pruning
cut short before its directory sync), pruning after every checkpoint with 1 to 3 kept, bits
flipped in logs, checkpoints and registrations, files lost, dropped connections,
partitions and heals, paused primaries and takeovers, and in a tenth of them a simulated
Raft cluster (``raftlog``); each checked for exactly-once,
in-order delivery, every awaited answer, one writer per epoch, no link read past
back-pressure's limits, recovered states equal to replays of their logs, followers
equal to their primary, every kept checkpoint with every log after it and as many
intact checkpoints kept as asked, and damage refused in one line naming its file or repaired,
never read as valid, never a silent rollback, no link between the coordinators refused
or broken, no Raft entry of an epoch sent after a newer claim was committed, and no
Raft append acknowledged that a reader skips.
Each mutation of the coordinator's rules in ``mutants`` is found within the seeds run
here, and a failing seed reproduces exactly and shrinks to a short run."""

from __future__ import annotations

import collections
import random

import pytest

from tests.sim.__main__ import main as sweep
from tests.sim.mutants import MUTANTS, RAFT_MUTANTS
from tests.sim.raftlog import run_raft
from tests.sim.seeds import first_failing
from tests.sim.world import ReplicaNode, Scenario, SimFailure, World, explain

CHUNKS = 10
PER_CHUNK = 1000  # CHUNKS * PER_CHUNK seeds in all
MUTANT_SEEDS = 2000  # a mutant must be found within this many seeds


# A chunk is CPU-bound and cannot wait on anything: on a machine busy with six times
# more than it has cores it took over 300 s (the suite's limit for a test that hangs).
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_seeded_runs_deliver_every_call_once_in_order_through_faults(chunk: int) -> None:
    seen: collections.Counter[str] = collections.Counter()
    for seed in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK):
        try:
            world = Scenario.of(seed).run()
        except SimFailure:
            pytest.fail(explain(seed), pytrace=False)
        seen.update(world.counts)
    # The runs did what they are for: every fault and every recovery path, many times.
    for what in ("crash", "drop", "cut", "heal", "recovered", "checkpoint", "written",
                 "pause", "takeover", "fenced", "flip", "lose", "refused", "repaired",
                 "torn", "temporary", "paused", "secondary",
                 "register-upgrade", "flip-registration", "upgrade retry"):
        assert seen[what] >= 100, (what, seen)
    # A replica starting from the secondary's checkpoint: 42 to 78 per thousand seeds
    # since a takeover takes a step per stage (crashes and faults come between them).
    assert seen["from secondary"] >= 25, seen
    # Rarer: a sender leaving an old primary that still reads, a resent record partly
    # taken before, an upgrade begun afresh or found finished (each mutant of theirs is
    # found within a few hundred seeds all the same).
    assert seen["moved"] >= 10 and seen["overlap"] >= 1, seen
    assert seen["upgraded"] >= 40 and seen["upgrade afresh"] >= 10, seen
    assert seen["upgrade finished"] >= 1, seen
    # A replica set upgraded live (``aa_upgrade``): 89 per thousand seeds finished, its
    # upgrader killed 34 times between two of its steps, and 75 replicas of the old
    # version stopped by the registration once their claim won.
    assert seen["aa upgraded"] >= 30 and seen["aa crash"] >= 10, seen
    assert seen["superseded"] >= 25, seen
    # A tenth of the seeds run a simulated Raft cluster too (``raftlog``): paused and
    # crashed primaries, lost leaders and stalls past the lease, entries landing late.
    for what in ("raft pause", "raft fenced", "raft renewed", "raft stall", "raft rejoined",
                 "raft slow send"):
        assert seen[what] >= 20, (what, seen)
    assert seen["raft crash"] >= 10, seen  # 23 to 47 per thousand seeds
    # Pruning after each checkpoint (about 9,600 files removed per thousand seeds), and
    # a crash while pruning, before its directory sync (about 120).
    assert seen["pruned"] >= 3000 and seen["pruning cut"] >= 50, seen


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_each_kept_mutant_of_the_rules_is_found(mutant: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cls, name, wrong = MUTANTS[mutant]
    monkeypatch.setattr(cls, name, wrong)
    assert first_failing(Scenario.of, MUTANT_SEEDS) is not None, f"not found: {mutant}"


def test_a_failing_seed_reproduces_exactly_and_shrinks(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    cls, name, wrong = MUTANTS["a resent record's overlap is queued again"]
    monkeypatch.setattr(cls, name, wrong)
    seed = first_failing(Scenario.of, MUTANT_SEEDS)
    assert seed is not None
    scenario = Scenario.of(seed)
    runs = []
    for _ in range(2):
        with pytest.raises(SimFailure) as failed:
            scenario.run()
        runs.append((str(failed.value), failed.value.trace))
    assert runs[0] == runs[1]  # the same steps, the same failure
    text = explain(seed)
    assert f"seed {seed}" in text and "a shortest run found" in text
    shown = int(text.split("a shortest run found (")[1].split(" of ")[0])
    assert shown < len(runs[0][1])
    monkeypatch.undo()
    assert explain(seed) == f"seed {seed} passes"


def test_the_sweep_command_summarises_and_fails_on_a_failing_seed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m tests.sim`` (what ``make chaos`` runs): a summary line, exit 0; with
    a mutant in, each failing seed explained and exit 1."""
    assert sweep(["--seeds", "3", "--first", "7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 simulated runs (seeds 7..9) in ") and ": 0 failed;" in out
    cls, name, wrong = MUTANTS["a record is delivered before it is synced"]
    monkeypatch.setattr(cls, name, wrong)
    assert sweep(["--seeds", "2"]) == 1
    out = capsys.readouterr().out
    assert "seed 0 (" in out and "a shortest run found" in out and ": 2 failed;" in out


def _stalled_standby(monkeypatch: pytest.MonkeyPatch) -> World:
    """Replicas of i0 with a checkpointing secondary, keeping 1 checkpoint (the sink
    keeps 2), with the standby i0/2 stalled once it follows (a process that is not
    scheduled) until the secondary has pruned the log it reads; then settled."""
    can_follow = ReplicaNode.can_follow
    stalled = [True]

    def held(self: ReplicaNode) -> bool:
        stall = stalled[0] and self.id == "i0/2" and self.tail is not None
        return not stall and can_follow(self)

    monkeypatch.setattr(ReplicaNode, "can_follow", held)
    world = World(n=2, rounds=4, trigger=400, replicas=3, secondary=True, keep=1)
    rng = random.Random(0)
    disk = world.disks["i0"]
    while not ((node := world.nodes["i0/2"]) is not None and node.tail is not None
               and node.tail[0] < min(disk.logs)):
        world.do(rng.choice(world.steps(faults=False)))
    stalled[0] = False
    world.settle(rng)
    return world


def test_a_standby_whose_log_was_pruned_under_it_stops_and_follows_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The standby stops in one line (``LogTail.poll``'s ``MissingLogError``), is started
    again and follows from the newest checkpoint; one that looked for its log for ever
    (as ``LogTail.poll`` did) ends the run behind its primary."""
    world = _stalled_standby(monkeypatch)
    assert world.counts["pruned under"] == 1 and world.counts["restart"] == 1
    monkeypatch.setattr(ReplicaNode, "pruned_under", lambda self: False)
    with pytest.raises(SimFailure, match=r"i0/2 follows with .* but the primary"):
        _stalled_standby(monkeypatch)


def _first_failing_raft(limit: int) -> int | None:
    for seed in range(limit):
        try:
            run_raft(seed)
        except SimFailure:
            return seed
    return None


@pytest.mark.parametrize("mutant", sorted(RAFT_MUTANTS))
def test_each_raft_mutant_is_found(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module, name, wrong = RAFT_MUTANTS[mutant]
    monkeypatch.setattr(module, name, wrong)
    assert _first_failing_raft(MUTANT_SEEDS) is not None, f"not found: {mutant}"
