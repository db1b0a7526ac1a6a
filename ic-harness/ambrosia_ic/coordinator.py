"""The live coordinator: start-up flows, the binding session, group commit, checkpoints
and links. One ``Coordinator`` object holds all of its state, so several can run in one
process (tests do).

Inputs (self-calls, Impulses, calls arriving on links) wait in ``pending``; the committer
packs whatever has gathered into one data record, writes and fsyncs it off the event
loop, and only then delivers it to the binding and acknowledges it to senders. While
one fsync runs the next batch gathers, so throughput does not pay one fsync per call.

Replayable outputs are numbered per destination, the instance itself included, so that
a replay that regenerates them can tell which ones were already logged (by us, for
self-calls, or by the destination, for links) and drop those.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ambrosia_py.errors import (
    AmbrosiaError,
    CoordinatorError,
    LinkAuthenticationError,
    RegistryError,
    RemoteProtocolError,
    UnexpectedMessageError,
)
from ambrosia_py.wire import (
    AttachTo,
    Checkpoint,
    CheckpointChunk,
    CheckpointEnd,
    Direction,
    InitialMessage,
    LogRecord,
    LogRecordDecoder,
    MessageStreamDecoder,
    OutgoingRpc,
    Rpc,
    RpcBatch,
    TakeBecomingPrimaryCheckpoint,
    TakeCheckpoint,
    TrimTo,
    UpgradeTakeCheckpoint,
    check_bytes,
    encode_checkpoint_record,
    encode_control_record,
)

from . import registry
from .binding import LOOPBACK, BindingPorts, reserve_port
from .lease import current_primary
from .links import HANDSHAKE_TIMEOUT, OutboundLink, accept_link
from .logstore import (
    CHECKPOINT_PREFIX,
    DIGEST_PREFIX,
    LOG_PREFIX,
    DigestWriter,
    InstanceLock,
    LogWriter,
    digest_path,
    encode_disk_record,
    file_numbers,
    fsync_dir,
    log_path,
    read_digest,
    remove_first_start_leftovers,
    remove_unkept,
    write_checkpoint,
)
from .recovery import (
    STATE_FORMAT,
    RecoveryPlan,
    check_no_orphan_logs,
    first_start_pending,
    latest_checkpoint,
    plan_recovery,
    replay_wire,
)

__all__ = ["EXIT_BINDING_LOST", "EXIT_MALFORMED", "Coordinator"]

EXIT_BINDING_LOST = 1
EXIT_MALFORMED = 2
MAX_BATCH_BYTES = 1 << 20

# (input key, link sequence number, message bytes): key is the sender's instance name
# (our own for self-calls) or None for inputs that carry no number (Impulses).
Input = tuple[str | None, int | None, bytes]
CheckpointData = tuple[bytes, list[bytes], dict[str, Any]]


class Coordinator:
    """The coordinator of one registered instance."""

    replicated = False  # ReplicaCoordinator (replica.py) runs active/active instances

    def __init__(
        self,
        reg: registry.Registration,
        home: Path,
        *,
        replica: int = 0,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        if (reg.active_active or replica) and not self.replicated:
            raise CoordinatorError(
                f"{reg.instance_name}: active/active instances run as replicas "
                "(ReplicaCoordinator); register with --active-active to use --replica"
            )
        self.reg = reg
        self.name = reg.instance_name
        self.home = home
        self.cid = reg.committer_id
        self.dir = registry.instance_dir(reg)
        self.secret = registry.link_secret(home)
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.trigger_bytes = reg.log_trigger_size_mb * 1024 * 1024
        self.receive_port, self.send_port, self.ic_port = (
            reg.receive_port, reg.send_port, reg.ic_port)
        # active/active: the epoch stamped on records, whether outbound links may
        # connect yet (a follower only keeps their numbering), and replay digests
        # (written by a standalone coordinator only: replicas share the directory).
        self.epoch: int | None = None
        self.links_active = True
        self.digests = True
        # durable log state
        self.next_seq = 0
        self.inputs: dict[str, int] = {}
        self.log_n = 0
        self.writer: LogWriter | None = None
        # delivery and outputs
        self.send: asyncio.StreamWriter | None = None
        self.last_delivered = -1
        self.pending: collections.deque[Input] = collections.deque()
        self.self_next = 1
        self.self_unacked: collections.deque[tuple[int, bytes]] = collections.deque()
        self.links: dict[str, OutboundLink] = {}
        self.inbound: dict[str, set[asyncio.StreamWriter]] = {}
        self.accepted: dict[str, int] = {}
        # checkpoints and the replay digest
        self.digest: DigestWriter | None = None
        self.digest_skip = 0
        self._ckpt_expect: tuple[int, asyncio.Future[CheckpointData]] | None = None
        self._ckpt_parts: tuple[bytes, list[bytes], dict[str, Any]] | None = None
        self.ckpt_in_flight = False
        self.switch_requested = False
        self.phase = "starting"
        self._initial: asyncio.Future[InitialMessage] | None = None
        self._lock = InstanceLock(self.dir)
        # A live upgrade recovers version N's files with the old code, then moves to
        # version M's directory; ``upgrade_to`` is M while that is owed.
        self.upgrade_to: int | None = None
        self._new_lock: InstanceLock | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._write_lock = asyncio.Lock()
        self._done: asyncio.Future[tuple[int, str]] | None = None
        self._pending_event: asyncio.Event | None = None
        self._link_server: asyncio.Server | None = None
        self._link_sock: socket.socket | None = None
        # Checkpoints this recovery passed over as damaged: not counted as kept.
        self.damaged: set[int] = set()

    # ------------------------------------------------------------------ plumbing
    def log(self, text: str) -> None:
        print(f"ambrosia-ic: {self.name}: {text}", file=self.stderr, flush=True)

    def _finish(self, code: int, message: str) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result((code, message))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        # A checkpoint spawns a task each time: forget finished ones, or a long-running
        # coordinator keeps every one it ever ran.
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)
        if task.cancelled():
            return
        err = task.exception()
        if err is not None:
            if isinstance(err, AmbrosiaError):
                self._finish(1, str(err))
            else:
                self._finish(1, f"internal error: {type(err).__name__}: {err}")

    def _deliver(self, data: bytes) -> None:
        assert self.send is not None
        self.send.write(data)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        """Run until the binding goes away or something fails; returns the exit code."""
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._pending_event = asyncio.Event()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        ports = BindingPorts(self.reg.receive_port, self.reg.send_port, self.log)
        try:
            # Every port first: a busy one must stop the start before anything is written.
            self._link_sock = reserve_port(self.ic_port, "links")
            await ports.open()
            plan = self._choose_flow()
            print(
                f"ambrosia-ic ready: instance={self.name} receive={self.reg.receive_port} "
                f"send={self.reg.send_port} ic={self.reg.ic_port}",
                file=self.stdout, flush=True,
            )
            reader, self.send = await ports.accept()
            self._spawn(self._read_binding(reader))
            self._spawn(self._start(plan))
            code, message = await self._done
        finally:
            await self._shutdown()
            ports.close()
            self._lock.release()
            if self._new_lock is not None:
                self._new_lock.release()
        if message:
            self.log(message)
        return code

    def _choose_flow(self) -> RecoveryPlan | None:
        if self.reg.upgrading:
            self._prepare_upgrade()
        mode = self.reg.create_service
        if first_start_pending(self.dir, self.cid):
            leftovers = latest_checkpoint(self.dir) is not None
            if mode == "always-recover":
                raise CoordinatorError(
                    f"{self.name}: --create-service always-recover, but {self.dir} holds no "
                    "checkpoint to recover from"
                    + (" (only the leftovers of an interrupted first start)" if leftovers
                       else "")
                )
            if leftovers:
                self.log("the first start was interrupted before its InitialMessage was "
                         "logged; starting afresh")
            return None
        have = latest_checkpoint(self.dir)
        if mode == "no-recovery":
            raise CoordinatorError(
                f"{self.name}: --create-service no-recovery, but {self.dir} already holds "
                f"checkpoint {have}; remove that directory to start afresh"
            )
        plan = plan_recovery(self.dir, self.cid)
        if plan is not None:
            for _, err in plan.damaged:
                self.log(f"{err}; recovering from checkpoint {plan.number} and its logs instead")
            self.damaged = {n for n, _ in plan.damaged}
        if plan is not None and plan.torn is not None:
            path, offset = plan.torn
            self.log(f"cutting a torn record off {path} at offset {offset}")
            LogWriter(path, truncate_at=offset).close()
        return plan

    def _prepare_upgrade(self) -> None:
        """Decide between finishing, retrying or skipping a standalone live upgrade.

        The upgrade is done exactly when version M's directory holds a checkpoint: that
        checkpoint is written (durably, by rename) before anything else there counts.
        If it exists, only the registration update was missed: record it and recover M.
        Otherwise M's directory holds at most leftovers of an attempt that died, which
        are removed, and version N's files (never touched by an upgrade) are recovered
        again with the old code and the upgrade retried.
        """
        m = self.reg.upgrade_version
        new_dir = registry.instance_dir(self.reg, m)
        if latest_checkpoint(new_dir) is not None:
            self._move_to_version(m)
            self.log(f"the upgrade to version {m} had finished; running version {m}")
            return
        if new_dir.is_dir():
            for prefix in (LOG_PREFIX, DIGEST_PREFIX):
                for k in file_numbers(new_dir, prefix):
                    (new_dir / f"{prefix}{k}").unlink()
        if first_start_pending(self.dir, self.cid):
            # Nothing to upgrade from: version M simply starts afresh.
            self._move_to_version(m)
            return
        self.upgrade_to = m

    def _move_to_version(self, m: int) -> None:
        self.reg = registry.set_versions(self.name, m, m, self.home)
        self._lock.release()
        self.dir = registry.instance_dir(self.reg)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = InstanceLock(self.dir)
        self._lock.acquire()

    async def _shutdown(self) -> None:
        # Let a write in progress finish: what is durable must stay whole.
        async with self._write_lock:
            tasks = list(self._tasks)  # finishing tasks remove themselves from the list
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        for link in self.links.values():
            await link.stop()
        if self._link_server is not None:
            self._link_server.close()
        elif self._link_sock is not None:
            self._link_sock.close()
        for writers in self.inbound.values():
            for w in writers:
                w.close()
        if self.send is not None:
            self.send.close()
        if self.writer is not None:
            self.writer.close()
        if self.digest is not None:
            self.digest.close()

    # ------------------------------------------------------------------ start-up flows
    async def _start(self, plan: RecoveryPlan | None) -> None:
        if plan is None:
            # Nothing of a first start may reach another instance before its record 0
            # is durable: until then a restart does the first start again.
            self.links_active = False
            await self._first_start()
            self.links_active = True
            for link in self.links.values():
                link.start()
        else:
            await self._recover(plan)
        self.phase = "live"
        self._spawn(self._committer())
        self._link_server = await self._open_link_server()
        self._pending_event.set()  # type: ignore[union-attr]

    async def _first_start(self) -> None:
        """Checkpoint 1, log 1, then the InitialMessage as record 0, durably, before
        anything else happens: until record 0 is on disk the next start is a first
        start again (``recovery.interrupted_first_start``)."""
        self.phase = "first-start"
        check_no_orphan_logs(self.dir)  # never start afresh over a history that happened
        remove_first_start_leftovers(self.dir)
        loop = asyncio.get_running_loop()
        self._initial = loop.create_future()
        fut = self._expect_checkpoint(1)
        self._deliver(encode_control_record(self.cid, TakeBecomingPrimaryCheckpoint()))
        await self.send.drain()  # type: ignore[union-attr]
        initial = await self._initial
        message, chunks, outputs = await fut
        state = self._state(0, {}, outputs)
        await asyncio.to_thread(write_checkpoint, self.dir, 1, state, message, chunks)
        self.writer = LogWriter(log_path(self.dir, 1))
        self.log_n = 1
        await asyncio.to_thread(fsync_dir, self.dir)
        # The InitialMessage, echoed whole, is the first data record (with the self-calls
        # the binding made while starting, as the committer would batch them).
        self.pending.appendleft((None, None, initial.encode()))
        await self._commit_batch()

    async def _recover(self, plan: RecoveryPlan) -> None:
        self.phase = "recovering"
        self.next_seq = plan.next_seq
        self.inputs = dict(plan.inputs)
        self.last_delivered = plan.start_seq - 1
        self._restore_outputs(plan.outputs)
        for k in file_numbers(self.dir, DIGEST_PREFIX):  # digests of checkpoints never made
            if k > plan.number:
                (self.dir / f"{DIGEST_PREFIX}{k}").unlink()
        dpath = digest_path(self.dir, plan.number)
        self.digest_skip = len(read_digest(dpath))
        self.digest = DigestWriter(dpath, keep=self.digest_skip)
        send = self.send
        assert send is not None
        send.write(encode_checkpoint_record(self.cid, plan.checkpoint.size))
        for chunk in plan.checkpoint.chunks():
            send.write(chunk)
            await send.drain()
        # Replayed records go out about 1 MiB per write (a write per record costs the
        # transport a send() call each time its buffer has just drained), cut from the
        # spans the plan's scan found: the logs are checked and parsed once per recovery.
        for wire, last in replay_wire(plan):
            send.write(wire)
            self.last_delivered = last
            await send.drain()
        new_n = plan.last_log + 1
        if self.upgrade_to is not None:
            await self._upgrade(new_n)
            return
        fut = self._expect_checkpoint(new_n)
        self._deliver(encode_control_record(self.cid, TakeBecomingPrimaryCheckpoint()))
        await send.drain()
        message, chunks, outputs = await fut
        state = self._state(self.next_seq, self.inputs, outputs)
        self.writer = LogWriter(log_path(self.dir, new_n))
        self.log_n = new_n
        await asyncio.to_thread(write_checkpoint, self.dir, new_n, state, message, chunks)
        await asyncio.to_thread(self._remove_unkept)

    async def _upgrade(self, new_n: int) -> None:
        """Recovery with the old code is complete: switch to version M.

        Version N's files stay as they are; version M's directory gets checkpoint
        ``new_n`` (numbers go on from N's logs, as do sequence ids) and then its log.
        Until that checkpoint is durable nothing in M's directory counts, so a binding
        that dies first leaves the upgrade to be retried from version N.
        """
        m = self.upgrade_to
        assert m is not None and self.send is not None
        old_version = self.reg.current_version
        new_dir = registry.instance_dir(self.reg, m)
        new_dir.mkdir(parents=True, exist_ok=True)
        self._new_lock = InstanceLock(new_dir)
        self._new_lock.acquire()
        if self.digest is not None:
            self.digest.close()
            self.digest = None
        self.dir = new_dir  # the new version's digest starts with its checkpoint
        fut = self._expect_checkpoint(new_n)
        self._deliver(encode_control_record(self.cid, UpgradeTakeCheckpoint()))
        await self.send.drain()
        message, chunks, outputs = await fut
        state = self._state(self.next_seq, self.inputs, outputs)
        await asyncio.to_thread(write_checkpoint, new_dir, new_n, state, message, chunks)
        self.writer = LogWriter(log_path(new_dir, new_n))
        self.log_n = new_n
        await asyncio.to_thread(fsync_dir, new_dir)
        self.reg = registry.set_versions(self.name, m, m, self.home)
        self.upgrade_to = None
        self.log(f"upgraded from version {old_version} to version {m}")

    def _restore_outputs(self, outputs: dict[str, dict[str, Any]]) -> None:
        for dest, out in outputs.items():
            unacked = [(int(s), bytes(b)) for s, b in out["unacked"]]
            if dest == self.name:
                self.self_next = out["next"]
                done = self.inputs.get(self.name, 0)
                for seq, body in unacked:
                    if seq > done:  # made before the checkpoint, never logged: log it now
                        self.self_unacked.append((seq, body))
                        self.pending.append((self.name, seq, body))
            else:
                link = self._make_link(dest, out["next"], unacked)
                if self.links_active:
                    link.start()

    @staticmethod
    def _state(next_seq: int, inputs: dict[str, int], outputs: dict[str, Any]) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "next_seq": next_seq, "inputs": dict(inputs),
                "outputs": outputs}

    def _remove_unkept(self) -> None:
        """Once a new checkpoint is durable: keep the registration's last K checkpoints
        with their logs and digests (what a repro from any of them needs)."""
        remove_unkept(self.dir, self.reg.keep_checkpoints,
                      (LOG_PREFIX, CHECKPOINT_PREFIX, DIGEST_PREFIX), self.damaged)

    # ------------------------------------------------------------------ checkpoints
    def _expect_checkpoint(self, n: int) -> asyncio.Future[CheckpointData]:
        fut: asyncio.Future[CheckpointData] = asyncio.get_running_loop().create_future()
        self._ckpt_expect = (n, fut)
        return fut

    def _outputs_snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {d: link.snapshot() for d, link in self.links.items()}
        out[self.name] = {"next": self.self_next, "unacked": [[s, b] for s, b in self.self_unacked]}
        return out

    def request_checkpoint(self) -> None:
        if self.phase == "live" and not self.ckpt_in_flight:
            self.switch_requested = True
            self._pending_event.set()  # type: ignore[union-attr]

    def _switch_log(self) -> None:
        """Runs in the committer between records: later records go to the next log."""
        self.switch_requested = False
        self.ckpt_in_flight = True
        n = self.log_n + 1
        state_inputs = (self.next_seq, dict(self.inputs))
        fut = self._expect_checkpoint(n)
        self._deliver(encode_control_record(self.cid, TakeCheckpoint()))
        old = self.writer
        self.writer = LogWriter(log_path(self.dir, n))
        self.log_n = n
        if old is not None:
            old.close()
        self._spawn(self._finish_checkpoint(n, state_inputs, fut))

    async def _finish_checkpoint(
        self, n: int, state_inputs: tuple[int, dict[str, int]],
        fut: asyncio.Future[CheckpointData],
    ) -> None:
        message, chunks, outputs = await fut
        state = self._state(state_inputs[0], state_inputs[1], outputs)
        await asyncio.to_thread(write_checkpoint, self.dir, n, state, message, chunks)
        await asyncio.to_thread(self._remove_unkept)
        self.ckpt_in_flight = False

    # ------------------------------------------------------------------ the binding
    async def _read_binding(self, reader: asyncio.StreamReader) -> None:
        decoder = MessageStreamDecoder()
        while True:
            data = await reader.read(1 << 16)
            if not data:
                self._finish(EXIT_BINDING_LOST, "the binding closed its connection; exiting "
                             "(restart the coordinator and the binding together to recover)")
                return
            try:
                decoder.receive_data(data)
                for ev in decoder.events():
                    self._on_binding_event(ev)
            except RemoteProtocolError as err:
                self._finish(EXIT_MALFORMED, f"binding sent malformed bytes: {err}")
                return

    def _on_binding_event(self, ev: Any) -> None:
        t = type(ev)
        if t is OutgoingRpc:
            self._output(ev)
        elif t is RpcBatch:
            for rpc in ev.rpcs:
                self._output(rpc)
        elif t is CheckpointChunk:
            assert self._ckpt_parts is not None
            self._ckpt_parts[1].append(ev.data)
        elif t is Checkpoint:
            self._checkpoint_begins(ev)
        elif t is CheckpointEnd:
            parts, self._ckpt_parts = self._ckpt_parts, None
            assert parts is not None and self._ckpt_expect is not None
            fut = self._ckpt_expect[1]
            self._ckpt_expect = None
            fut.set_result(parts)
        elif t is AttachTo:
            if ev.destination not in ("", self.name):
                self._link(ev.destination)
        elif t is TakeCheckpoint:
            self.request_checkpoint()
        elif t is InitialMessage:
            if self._initial is None or self._initial.done():
                raise UnexpectedMessageError("an InitialMessage outside a first start")
            self._initial.set_result(ev)
        else:
            raise UnexpectedMessageError(f"{t.__name__} from a binding")

    def _checkpoint_begins(self, ev: Checkpoint) -> None:
        if self._ckpt_expect is None:
            raise UnexpectedMessageError("a Checkpoint the coordinator did not ask for")
        if self._initial is not None and not self._initial.done():
            raise UnexpectedMessageError("a Checkpoint before the InitialMessage")
        n = self._ckpt_expect[0]
        # Outputs before this message came from records before the checkpoint; from here
        # on they belong to the next interval, so the digest moves on too.
        self._ckpt_parts = (ev.encode(), [], self._outputs_snapshot())
        if self.digest is not None:
            self.digest.close()
            self.digest = None
        if self.digests:
            self.digest = DigestWriter(digest_path(self.dir, n), keep=0)
        self.digest_skip = 0

    def _output(self, rpc: OutgoingRpc) -> None:
        impulse = rpc.reserved == 0 and rpc.rpc_type == 2
        incoming = Rpc(rpc.method_id, rpc.rpc_type, rpc.args, rpc.reserved).encode()
        if not impulse and self.digest is not None:
            if self.digest_skip:
                self.digest_skip -= 1
            else:
                self.digest.add(check_bytes(rpc.encode()), self.last_delivered)
        if rpc.destination in ("", self.name):
            if impulse:
                self._submit((None, None, incoming))
                return
            seq = self.self_next
            self.self_next += 1
            if seq <= self.inputs.get(self.name, 0):
                return  # replay regenerated a self-call that is already in the log
            self.self_unacked.append((seq, incoming))
            self._submit((self.name, seq, incoming))
        else:
            link = self._link(rpc.destination)
            if impulse:
                link.add_impulse(incoming)
            else:
                link.add(incoming)

    def _submit(self, item: Input) -> None:
        self.pending.append(item)
        if self.phase == "live":
            self._pending_event.set()  # type: ignore[union-attr]

    # ------------------------------------------------------------------ group commit
    def _write_sync(self, writer: LogWriter, data: bytes) -> None:
        writer.write(data)
        writer.sync()

    async def _committer(self) -> None:
        event = self._pending_event
        assert event is not None and self.send is not None
        while True:
            await event.wait()
            event.clear()
            while self.pending or self.switch_requested:
                if self.switch_requested:
                    self._switch_log()
                    continue
                await self._commit_batch()
            await self.send.drain()

    async def _commit_batch(self) -> None:
        batch: list[bytes] = []
        size = 0
        inputs = dict(self.inputs)
        senders: set[str] = set()
        while self.pending and size < MAX_BATCH_BYTES:
            key, seq, body = self.pending.popleft()
            batch.append(body)
            size += len(body)
            if key is not None and seq is not None:
                inputs[key] = max(inputs.get(key, 0), seq)
                senders.add(key)
        seq_id = self.next_seq
        disk, wire = encode_disk_record(self.cid, seq_id, b"".join(batch), inputs, self.epoch)
        writer = self.writer
        assert writer is not None and self.send is not None
        async with self._write_lock:
            await asyncio.to_thread(self._write_sync, writer, disk)
        self.next_seq = seq_id + 1
        self.inputs = inputs
        self._deliver(wire)
        self.last_delivered = seq_id
        done_self = inputs.get(self.name, 0)
        while self.self_unacked and self.self_unacked[0][0] <= done_self:
            self.self_unacked.popleft()
        for sender in senders - {self.name}:
            ack = TrimTo(inputs[sender]).encode()
            for w in self.inbound.get(sender, ()):
                w.write(ack)
        if writer.size >= self.trigger_bytes and not self.ckpt_in_flight:
            self.switch_requested = True

    # ------------------------------------------------------------------ links
    def _address(self, dest: str) -> Callable[[], tuple[str, int]]:
        home = self.home

        def address() -> tuple[str, int]:
            reg = registry.load(dest, home)
            if reg.active_active:
                # The newest epoch file names the replica holding the log.
                port = current_primary(registry.instance_dir(reg)).get("ic_port")
                if isinstance(port, int):
                    return LOOPBACK, port
            return LOOPBACK, reg.ic_port

        return address

    def _make_link(self, dest: str, next_seq: int = 1,
                   unacked: list[tuple[int, bytes]] | None = None) -> OutboundLink:
        link = OutboundLink(self.name, dest, self.secret, self._address(dest), self.log,
                            next_seq, unacked)
        self.links[dest] = link
        return link

    def _link(self, dest: str) -> OutboundLink:
        link = self.links.get(dest)
        if link is None:
            try:
                registry.load(dest, self.home)
            except RegistryError as err:
                self.log(f"calls to {dest!r} will wait: {err}")
            link = self._make_link(dest)
            if self.links_active:
                link.start()
        return link

    def _is_registered(self, name: str) -> bool:
        try:
            registry.load(name, self.home)
        except RegistryError:
            return False
        return True

    async def _open_link_server(self) -> asyncio.Server:
        try:
            if self._link_sock is not None:  # reserved before the start began
                return await asyncio.start_server(self._on_link, sock=self._link_sock)
            return await asyncio.start_server(self._on_link, LOOPBACK, self.ic_port,
                                              reuse_address=True)
        except OSError as err:
            raise CoordinatorError(
                f"cannot listen for links on {LOOPBACK}:{self.ic_port}: {err.strerror}"
            ) from None

    async def _on_link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            sender = await asyncio.wait_for(
                accept_link(reader, writer, self.secret, self.name, self._is_registered,
                            lambda s: self.inputs.get(s, 0)),
                HANDSHAKE_TIMEOUT,
            )
        except (TimeoutError, LinkAuthenticationError, OSError, asyncio.IncompleteReadError) as err:
            self.log(f"refused a link from {peer[0]}:{peer[1]}: {str(err) or type(err).__name__}")
            writer.close()
            return
        self.inbound.setdefault(sender, set()).add(writer)
        decoder = LogRecordDecoder(direction=Direction.LINK)
        try:
            while data := await reader.read(1 << 16):
                decoder.receive_data(data)
                for rec in decoder.events():
                    assert isinstance(rec, LogRecord)
                    self._on_link_record(sender, rec)
        except RemoteProtocolError as err:
            self.log(f"link from {sender} broke the protocol: {err}")
        except OSError:
            pass  # the sender went away: it reconnects and resends from our position
        except asyncio.CancelledError:
            # The coordinator is stopping. Ending normally keeps asyncio's stream callback
            # (Python 3.11) from printing a traceback for a cancelled handler.
            pass
        finally:
            self.inbound[sender].discard(writer)
            writer.close()

    def _on_link_record(self, sender: str, rec: LogRecord) -> None:
        for m in rec.messages:
            if type(m) is not Rpc:
                raise UnexpectedMessageError(f"{type(m).__name__} on a link")
        body = b"".join(m.encode() for m in rec.messages)
        if rec.seq_id < 0:
            self._submit((None, None, body))  # an Impulse: unnumbered, at most once
            return
        accepted = self.accepted.get(sender, self.inputs.get(sender, 0))
        if rec.seq_id <= accepted:
            return  # a resend of something already logged or waiting to be
        if rec.seq_id != accepted + 1:
            raise UnexpectedMessageError(
                f"link sequence number {rec.seq_id} from {sender} after {accepted}"
            )
        self.accepted[sender] = rec.seq_id
        self._submit((sender, rec.seq_id, body))
