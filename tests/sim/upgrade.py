"""Registrations and live upgrades in the simulation (``startup``'s upgrade of a
standalone instance, driven by the real ``start_plan.choose_upgrade``).

Each standalone instance has a real registration file (with its check bytes), read by
the real ``registry.load`` at every start. While an instance is down, its operator may
register an upgrade to version 1 (``RoundsV2``), or a bit of its registration may flip.
A start registered for the upgrade asks ``choose_upgrade`` what to do first: finish an
upgrade that only missed its registration's update, retry one that died (removing what
it left in version 1's directory), or start version 1 afresh if the instance never
started. A retry recovers version 0 with the old code, asks its binding for
``UpgradeTakeCheckpoint`` and then, one step each so that a crash can come between
any two: creates log N in version 1's directory (and syncs its entry), writes
checkpoint N there, records the new version in the registration, and goes live.

Checked: a start reads its registration as it was written, or refuses in one line naming
it (``World._restart`` checks the line; nothing else changes); version 1's checkpoint
holds the old state through the new code (a replay of version 0's log from its oldest
kept checkpoint by the old class, converted once); no temporary checkpoint is left in
either directory after a start; at the end every registered upgrade is done, and the
instance runs version 1 having been converted exactly once (never, if it started afresh
in version 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from ambrosia_ic import registry
from ambrosia_ic.coordinator import start_plan
from ambrosia_ic.coordinator.phase import Phase
from ambrosia_ic.errors import RegistryError
from ambrosia_ic.registry.instances import instances_dir, registration_json
from ambrosia_ic.registry.registration import Registration

from ambrosia_core.errors import CoordinatorError
from ambrosia_core.wire import UpgradeTakeCheckpoint, encode_checkpoint_record

from .app import Rounds, RoundsV2
from .disk import SavedCheckpoint, SimDisk
from .world import Node, Refused, Step

if TYPE_CHECKING:
    from .world import World

__all__ = ["Upgrades", "UpgradingNode", "converted", "registry_home", "write_registration"]

# Where a bit of a registration flips: fractions of the file, and bits of that byte.
_REG_SPOTS = (0.02, 0.2, 0.4, 0.6, 0.8, 0.98)
_REG_BITS = (0, 2, 5)


class Upgrades:
    """The world's registrations and upgrades: a part of ``World`` (``World.extras``)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.home = registry_home(world)
        self.regs: dict[str, Registration] = {}  # as last written, intact
        self.disks: dict[str, dict[int, SimDisk]] = {}  # per instance, per version
        for k, name in enumerate(world.names):
            if name in world.replicated:
                continue
            self._write(Registration(instance_name=name, receive_port=2000 + 3 * k,
                                     send_port=2001 + 3 * k, ic_port=2002 + 3 * k,
                                     log_dir=str(world.root),
                                     committer_id=world.cid[name],
                                     keep_checkpoints=world.keep))
            self.disks[name] = {0: world.disks[name]}

    def _write(self, reg: Registration) -> None:
        """``ambrosia register-instance``: the registration's file."""
        self.regs[reg.instance_name] = reg
        write_registration(self.home, reg)

    def version_dir(self, name: str, m: int) -> Any:
        return self.world.root / f"{name}_{m}"

    def disk(self, name: str, m: int) -> SimDisk:
        """Version ``m``'s directory (created as ``make_dirs`` would, the first time)."""
        disks = self.disks[name]
        if m not in disks:
            disks[m] = SimDisk(self.world.root, f"{name}_{m}")
            disks[m].app = RoundsV2
        return disks[m]

    def finish(self, name: str, m: int) -> None:
        """``registry.set_versions``: the instance runs version ``m`` from now on."""
        self.regs[name] = registry.set_versions(name, m, m, self.home)
        self.world.disks[name] = self.disk(name, m)
        self.world.apps[name] = (RoundsV2, None)

    # -- the world's hooks
    def node(self, name: str) -> Node:
        return UpgradingNode(self.world, name, self)

    def steps(self, faults: bool) -> list[Step]:
        w = self.world
        out: list[Step] = []
        for name, reg in self.regs.items():
            node = w.nodes[name]
            if isinstance(node, UpgradingNode) and node.stage and (
                    node.stage == "register" or node.log_n in node.received):
                out.append(("upgrade", name))
            if node is None and faults and not w.disks[name].damage:
                if reg.current_version == 0 and not reg.upgrading:
                    out.append(("register-upgrade", name))
                out += [("flip-registration", name, where, bit) for where in _REG_SPOTS
                        for bit in _REG_BITS]
        return out

    def do(self, step: Step) -> bool:
        kind, name = step[0], step[1]
        if kind == "upgrade":
            node = self.world.nodes[name]
            assert isinstance(node, UpgradingNode)
            node.upgrade_step()
        elif kind == "register-upgrade":
            self._write(attrs.evolve(self.regs[name], upgrade_version=1))
            self.world.apps[name] = (Rounds, RoundsV2)
        elif kind == "flip-registration":
            path = instances_dir(self.home) / f"{name}.json"
            data = bytearray(path.read_bytes())
            at = min(len(data) - 1, int(len(data) * step[2]))
            self.world.disks[name].damage.append((path, at, bytes(data[at : at + 1])))
            data[at] ^= 1 << step[3]
            path.write_bytes(bytes(data))
        else:
            return False
        return True

    def check_end(self) -> None:
        w = self.world
        for name, reg in self.regs.items():
            if reg.upgrading:
                w.fail(f"{name} ended registered for an upgrade to version "
                       f"{reg.upgrade_version} that was never done")
            if reg.current_version == 0:
                continue
            node = w.serving(name)
            state = node.observed() if node is not None else None
            # Converted once if it had a history in version 0; never if it began in 1.
            want = 1 if self.disks[name][0].durable_end() else 0
            if state is None or state.get("upgrades") != want:
                w.fail(f"{name} runs version {reg.current_version} with "
                       f"{None if state is None else state.get('upgrades')} conversions "
                       f"of its state, expected {want}")

    def converted(self, name: str) -> dict[str, Any] | None:
        return converted(self.world, name, self.disks[name][0])


def registry_home(world: World) -> Path:
    """The home of the world's registrations (made the first time)."""
    home = world.root / "home"
    instances_dir(home).mkdir(parents=True, exist_ok=True)
    return home


def write_registration(home: Path, reg: Registration) -> None:
    """``ambrosia register-instance``: the registration's file."""
    path = instances_dir(home) / f"{reg.instance_name}.json"
    path.write_bytes(registration_json(reg, home))


def converted(world: World, name: str, old: SimDisk) -> dict[str, Any] | None:
    """Version 0's state as its log in ``old`` holds it, through
    ``RoundsV2.upgrade_from``: a fresh binding replays from the oldest checkpoint kept."""
    kept = old.replay_from()
    assert kept is not None
    first, records = kept
    fresh = world.new_engine(name, Rounds)
    fresh.receive_data(encode_checkpoint_record(world.cid[name], sum(map(len, first.chunks)))
                       + b"".join(first.chunks))
    for r in records:
        fresh.receive_data(r.wire)
    while fresh.next_output() is not None:
        pass
    return None if fresh.instance is None else RoundsV2.upgrade_from(
        fresh.instance).observed()


class UpgradingNode(Node):
    """A standalone instance's coordinator that reads its registration as it starts and
    carries out the live upgrade it asks for."""

    def __init__(self, world: World, name: str, upgrades: Upgrades) -> None:
        self.upgrades = upgrades
        self.upgrade_to: int | None = None
        self.stage = ""  # the upgrade's next step: "log", "save", "register"
        super().__init__(world, name)

    def _start(self) -> None:
        up = self.upgrades
        path = instances_dir(up.home) / f"{self.name}.json"
        before = path.read_bytes()
        try:
            try:
                reg = registry.load(self.name, up.home)
            except RegistryError as err:
                raise Refused(err) from None
            if reg != up.regs[self.name]:
                self.world.fail(f"{self.id} read its damaged registration as valid: {reg}")
            if reg.upgrading:
                self._prepare(reg.upgrade_version)
            super()._start()
        except Refused:
            if path.read_bytes() != before:
                self.world.fail(f"{self.id}'s refused start changed its registration")
            raise
        # The directories of the version it runs, and of the one it upgrades to.
        current = up.regs[self.name].current_version
        left = [t for v, d in up.disks[self.name].items() if v >= current
                for t in d.temporaries()]
        if left:
            self.world.fail(f"{self.id} started, and left {', '.join(left)}")

    def _prepare(self, m: int) -> None:
        """``startup._prepare_upgrade``: carry out ``choose_upgrade``."""
        up = self.upgrades
        try:
            chosen = start_plan.choose_upgrade(
                self.disk.dir, up.version_dir(self.name, m), self.core.cid, m,
                name=self.name, started=self.name in self.world.started)
        except CoordinatorError as err:
            raise Refused(err) from None
        self.world.counts[f"upgrade {chosen.kind}"] += 1
        if chosen.kind == "finished":
            self._move_to(m)
            self.lines.append(f"the upgrade to version {m} had finished")
            return
        for path in chosen.remove:
            path.unlink()
        if m in up.disks[self.name]:
            d = up.disks[self.name][m]
            d.logs = {k: log for k, log in d.logs.items() if log.path.exists()}
        if chosen.kind == "afresh":
            self._move_to(m)
            return
        self.upgrade_to = m

    def _move_to(self, m: int) -> None:
        self.upgrades.finish(self.name, m)
        self.disk = self.upgrades.disk(self.name, m)
        self.engine = self.world.new_engine(self.name)

    def _ask_to_go_live(self) -> None:
        if self.upgrade_to is None:
            super()._ask_to_go_live()
            return
        self.core.set_phase(Phase.UPGRADING)
        assert self.upgrade_to is not None
        self.disk = self.upgrades.disk(self.name, self.upgrade_to)  # ``c.dir = new_dir``
        self.core.ask_checkpoint(self.log_n, UpgradeTakeCheckpoint())
        self.flow, self.stage = "upgrade", "log"

    def upgrade_step(self) -> None:
        """``startup._upgrade``, one step at a time."""
        m, n, up = self.upgrade_to, self.log_n, self.upgrades
        assert m is not None
        if self.stage == "log":
            self.writer = self.sink.next_log(self.disk.dir, n)  # type: ignore[assignment]
            self.stage = "save"
        elif self.stage == "save":
            want = up.converted(self.name)
            if self.observed() != want:
                self.world.fail(f"{self.id} upgraded to {self.observed()}, but its old "
                                f"log through the new code gives {want}")
            message, chunks, outputs = self.received.pop(n)
            core = self.core
            self.disk.save_checkpoint(n, SavedCheckpoint(
                core.group.next_seq, dict(core.group.inputs), outputs, chunks), message)
            self.stage = "register"
        else:
            up.finish(self.name, m)
            self.upgrade_to, self.stage = None, ""
            self.world.counts["upgraded"] += 1
            self.recovered = True
            self._go_live()
