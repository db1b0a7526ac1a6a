"""The live coordinator of one registered instance: its state and its plumbing (logging
a line, stopping with one, tasks whose errors stop it, shutting down cleanly). One
``Coordinator`` object holds all of its state, so several can run in one process (tests
do). What it decides is its ``core`` (``core.CoordinatorCore``, no I/O).

The jobs the shell runs live above this module, each in its own and none imported here:
``process`` (open the ports, accept the binding, run the start-up flow; the standalone
coordinator), ``startup`` (first start, recovery, upgrade), ``reading`` (the binding's
bytes to the core), ``actions`` (what the core asks for), ``outputs`` (the links of its
outboxes), ``commit`` (group commit), ``checkpoints`` (asking for and writing
checkpoints), ``metrics`` (what a scrape reads of it). Below it: ``link_server`` (calls
from other instances), ``sink`` (how the log is written: standalone, or fenced for
active/active replicas), ``stats`` (what it counts), ``frames`` (the bytes paths).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

import attrs

from ambrosia_core.errors import AmbrosiaError, CoordinatorError
from ambrosia_core.loops import write_unless_closing
from ambrosia_core.tls import TlsOptions
from ambrosia_core.wire import InitialMessage

from .. import registry
from ..links import OutboundLink
from ..logstore import DigestWriter, InstanceLock, LogWriter, digest_path
from .core import CheckpointReceived, CoordinatorCore
from .directory import Directory, DirectoryFactory, RegistryDirectory
from .group_commit import PendingInput
from .link_server import LinkServer
from .sink import FencedSink, LogSink, StandaloneSink
from .stats import CoordinatorStats

__all__ = ["Coordinator", "LinkOptions", "PendingInput"]

# The flow a coordinator runs once its binding connected.
MainFlow = Callable[[], Coroutine[Any, Any, None]]


@attrs.frozen
class LinkOptions:
    """What one run of a coordinator uses for links instead of what is registered
    (``ambrosia ic --ic-host/--advertise/--link-secret-file``); None keeps the registered
    value. A new ``host`` without ``advertise`` advertises that host."""

    host: str | None = None
    advertise: str | None = None
    secret: bytes | None = None
    # TLS for the link server and the outbound links, and whether the link server may
    # listen beyond loopback without it (``ambrosia ic --tls-* / --insecure``).
    tls: TlsOptions = attrs.field(factory=TlsOptions)

# What a file system says when it, not the coordinator, failed.
# How long a superseded replica waits for its binding to close the connection that
# carried the notice (a binding that never reads it closes when its coordinator does).
NOTICE_LINGER = 5.0

_STORAGE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO,
                             errno.EFBIG})


class Coordinator:
    """The coordinator of one registered instance.

    Args:
        link: overrides of the registered link address and of the registry's secret.
        sink: how the log is written; a standalone writer unless given (replicas of an
            active/active instance pass a fenced one, see ``replication``).
        fsync_in_thread: write and fsync each record in a thread instead of on the event
            loop (see ``commit``); None: as the sink prefers.
        directory: makes the directory of instances (default: the registry, and the
            instance's own log store's published registrations).
        who: how its log lines name it (default: the instance's name).

    Raises:
        CoordinatorError: the instance is active/active but ``sink`` is not fenced.
    """

    def __init__(
        self,
        reg: registry.Registration,
        home: Path,
        *,
        replica: int = 0,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        sink: LogSink | None = None,
        fsync_in_thread: bool | None = None,
        link: LinkOptions | None = None,
        directory: DirectoryFactory | None = None,
        who: str | None = None,
    ) -> None:
        self.link_options = link or LinkOptions()
        self.sink: LogSink = sink if sink is not None else StandaloneSink()
        if (reg.active_active or replica) and not isinstance(self.sink, FencedSink):
            raise CoordinatorError(
                f"{reg.instance_name}: active/active instances run as replicas "
                "(ambrosia ic --replica N); register with --active-active to use --replica"
            )
        self.reg = reg
        self.name = reg.instance_name
        self.home = home
        self.cid = reg.committer_id
        self.dir = registry.instance_dir(reg)
        # What the coordinator decides, without I/O; this object runs its actions.
        self.core = CoordinatorCore(
            self.name, reg.committer_id,
            trigger_bytes=reg.log_trigger_size_mb * 1024 * 1024,
            keeps_early_impulses=self.sink.keeps_early_impulses, digests=self, who=who)
        self.secret = self.link_options.secret or registry.link_secret(home)
        self.tls = self.link_options.tls.load()  # the contexts, once (None: plain TCP)
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.receive_port, self.send_port, self.ic_port = (
            reg.receive_port, reg.send_port, reg.ic_port)
        # Whether outbound links may connect yet: nothing of a first start may reach
        # another instance before its record 0 is durable, and a follower only keeps
        # their numbering.
        self.links_active = True
        # the durable log
        self.stats = CoordinatorStats()  # what its metrics read
        self.log_n = 0
        self.writer: LogWriter | None = None
        self.write_lock = asyncio.Lock()
        self.fsync_in_thread = (self.sink.fsync_in_thread if fsync_in_thread is None
                                else fsync_in_thread)
        # delivery and outputs
        self.send: asyncio.StreamWriter | None = None
        self.wake = asyncio.Event()  # something to commit, or a checkpoint to take
        # While set, the links wait for the binding to read what was delivered.
        self.drain_wait: asyncio.Task[None] | None = None
        self.links: dict[str, OutboundLink] = {}  # each runs the core's outbox
        # Where other instances are (a port): this registry, and the registrations a Raft
        # cluster publishes for those it lacks (this instance's own log store, unless
        # ``ic --registry`` names another).
        self.directory: Directory = (directory or functools.partial(
            RegistryDirectory, home, reg.log_store))(self.log, self.spawn)
        self.link_server = LinkServer(
            self.name, home, self.secret, self.ic_port, self.core.logged,
            self.core.link_record, self.log, known=self.directory.known_sender,
            tls=self.tls)
        # Where the link server listens, and the host others dial (epoch claims name it).
        self.ic_host = self.advertise = ""
        self.set_link_hosts(reg.ic_host, reg.advertise_host)
        # checkpoints and the replay digest
        self.checkpoint_wait: asyncio.Future[CheckpointReceived] | None = None
        self.digest_file: DigestWriter | None = None
        self.initial: asyncio.Future[InitialMessage] | None = None
        # Checkpoints this recovery passed over as damaged: not counted as kept.
        self.damaged: set[int] = set()
        self.lock = InstanceLock(self.dir)
        # A live upgrade recovers version N's files with the old code, then moves to
        # version M's directory; ``upgrade_to`` is M while that is owed.
        self.upgrade_to: int | None = None
        self.new_lock: InstanceLock | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._done: asyncio.Future[tuple[int, str]] | None = None
        # The binding's receive connection (binding -> coordinator), set once the
        # binding closed it, and what runs first when the coordinator shuts down (a
        # superseded replica notifies its binding: ``notice_given``).
        self.binding_receive: asyncio.Transport | None = None
        self.binding_gone = asyncio.Event()
        self.notice_given = False
        self.on_shutdown: Callable[[], None] | None = None

    def set_link_hosts(self, host: str, advertise: str) -> None:
        """Listen for links as registered (``host``, dialled at ``advertise``), unless
        this run was told otherwise.

        Raises:
            RegistryError: the overrides make no address (a wildcard, not advertised).
        """
        o = self.link_options
        if o.host is not None or o.advertise is not None:
            host, advertise = registry.link_hosts(
                o.host or host,
                o.advertise or (advertise if o.host is None or advertise != host else None))
        self.ic_host, self.advertise = host, advertise
        self.link_server.host = host

    # ------------------------------------------------------------------ plumbing
    def log(self, text: str) -> None:
        print(f"ambrosia-ic: {self.core.who}: {text}", file=self.stderr, flush=True)

    def begin(self, n: int) -> DigestWriter | None:
        """The core's ``Digests`` port: checkpoint ``n``'s digest starts (as files)."""
        if self.digest_file is not None:
            self.digest_file.close()
            self.digest_file = None
        if self.sink.writes_digests:
            self.digest_file = DigestWriter(digest_path(self.dir, n), keep=0)
        return self.digest_file

    def set_digest(self, digest: DigestWriter | None, skip: int = 0) -> None:
        """Outputs go to ``digest`` from now on (the first ``skip`` it holds already)."""
        if self.digest_file is not None and self.digest_file is not digest:
            self.digest_file.close()
        self.digest_file = digest
        self.core.use_digest(digest, skip)

    def finish(self, code: int, message: str) -> None:
        """Stop with exit code ``code``, logging ``message`` (the first call wins)."""
        if self._done is not None and not self._done.done():
            self._done.set_result((code, message))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task; its error stops the coordinator with one line."""
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
            self.fail(err)

    def fail(self, err: BaseException) -> None:
        """Stop with exit code 1 and one line for ``err`` (a task's or a callback's)."""
        if isinstance(err, AmbrosiaError):
            self.finish(1, str(err))
        elif isinstance(err, OSError) and err.errno in _STORAGE_ERRORS:
            # The files failed (a full disk, a read-only or failing one): no bug of ours.
            where = err.filename if err.filename is not None else self.dir
            hint = ("; free some space, then start it again: nothing acknowledged is lost"
                    if err.errno in (errno.ENOSPC, errno.EDQUOT) else "")
            self.finish(1, f"the log's storage failed ({where}): "
                           f"{err.strerror or os.strerror(err.errno)}{hint}")
        else:
            self.finish(1, f"internal error: {type(err).__name__}: {err}")

    @property
    def stopping(self) -> bool:
        """Whether the coordinator was told to stop (nothing more is committed)."""
        return self._done is not None and self._done.done()

    def deliver(self, data: bytes) -> None:
        assert self.send is not None
        write_unless_closing(self.send, data)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        """Run until the binding goes away or something fails; returns the exit code
        (``process.StandaloneCoordinator``; a replica's coordinator is run by its
        ``replication`` role instead)."""
        raise NotImplementedError

    async def shutdown(self) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        # Let a write in progress finish: what is durable must stay whole.
        async with self.write_lock:
            tasks = list(self._tasks)  # finishing tasks remove themselves from the list
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        for link in self.links.values():
            await link.stop()
        self.link_server.close()
        if self.send is not None:
            self.send.close()
        await self._let_the_notice_be_read()
        if self.writer is not None:
            self.writer.close()
        if self.digest_file is not None:
            self.digest_file.close()

    async def _let_the_notice_be_read(self) -> None:
        """After a superseded replica's notice (``replication.common.notify_superseded``)
        the receive connection is half-closed; wait, a bounded time, for the binding to
        close its end, then close this one. Closed at once, it would often have bytes
        of the binding's unread, and a socket closed so resets the connection: the
        binding's reader then raises the reset instead of giving it the notice it had."""
        t = self.binding_receive
        if not self.notice_given or t is None or t.is_closing():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.binding_gone.wait(), NOTICE_LINGER)
        t.close()
