"""The primary's record processors: one child process per configured stream, driven over
its stdin/stdout by a ``ChildSession``. Nothing here changes the state: a checkpoint goes
to the immortal as the ``kcl_checkpoint`` Impulse, and the child is answered only after
the handler recorded it (so an answered checkpoint is in the log).

A child that exits, breaks the protocol, or stays silent for ``timeout_seconds`` while an
answer is due is killed and started again after a pause: each child is an attempt under
a declared retry (``restart_retry``: 0.1 s, doubling up to ``restart_max_seconds``), whose
back-off ``Restarts`` resets once a child stayed up ``STABLE_SECONDS``, and which also says
which failures and stderr lines are logged. Each
start begins at the checkpoint the state holds then. Its stderr goes to the log as it
comes, line by line (``StderrLines``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ambrosia_core.loops import write_unless_closing
from ambrosia_core.retry import Attempts
from ambrosia_py import AmbrosiaError, StopReason
from ambrosia_services.staging import StagingError, read_block

from .child import die_with_parent, pump_stderr
from .config import ProcessorConfig
from .core import KclCore, ProcessorRecord
from .protocol import (
    SHUTDOWN,
    CheckpointAsk,
    ChildSession,
    KclRecord,
    Reply,
    Skipped,
    StatusDone,
    Violation,
)
from .restarts import STABLE_SECONDS, ChildFailedError, Restarts, Said, restart_retry

__all__ = ["ChildFailedError", "ProcessorDriver"]

MAX_LINE = 16 << 20  # the longest stdout line taken from a child


class ProcessorDriver:
    """Runs one stream's record processor while the instance is primary.

    Args:
        cfg: the processor's configuration.
        core: reads the processors' state anew (an upgrade or a load may replace it).
        send_checkpoint: sends ``kcl_checkpoint(token, stream_id, sequence, at_end)``.
        log: the instance's log.
        first_token: the first checkpoint token (tokens of other lives never match).
        stop_reason: why the instance stops (``ctx.stop_reason``), read when cancelled.
        staging: the staging root, where the coordinator stages what it receives.
    """

    def __init__(self, cfg: ProcessorConfig, core: Callable[[], KclCore],
                 send_checkpoint: Callable[[int, int, int, bool], None],
                 log: logging.LoggerAdapter[Any], first_token: int,
                 stop_reason: Callable[[], StopReason | None], staging: str = "") -> None:
        self.cfg = cfg
        self.staging = staging
        self._stop_reason = stop_reason
        self._core = core
        self._send_checkpoint = send_checkpoint
        self.log = log
        self._wake = asyncio.Event()
        self._preexec = die_with_parent()
        self._answers: dict[int, asyncio.Future[str]] = {}
        self._next_token = first_token
        self._ended_seen = False  # shardEnded was sent; wait for new records
        self._checkpointed = False  # a checkpoint was recorded in this child's life
        self._pending: asyncio.Future[str] | None = None  # the checkpoint being recorded
        self.starts = 0
        self.pid = 0
        # Its children, each an attempt (``_child``); ``_failed`` says and waits.
        self.attempts = Attempts(restart_retry(cfg.restart_max_seconds), delay=self._failed)
        self._restarts = Restarts(self.attempts)

    # ------------------------------------------------------------ from handlers
    def wake(self) -> None:
        self._wake.set()

    def checkpointed(self, token: int, error: str) -> bool:
        """The handler recorded (or refused) the checkpoint ``token``."""
        fut = self._answers.pop(token, None)
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(error)
        return True

    # ------------------------------------------------------------ the task
    def _record(self) -> tuple[int, ProcessorRecord] | None:
        return self._core().by_name(self.cfg.stream)

    def _has_work(self) -> bool:
        found = self._record()
        if found is None:
            return False
        rec = found[1]
        if rec.waiting:
            return True
        return rec.ended and not rec.finished and not self._ended_seen

    async def run(self) -> None:
        while True:  # each pass ends with a child that ended well
            await self.attempts.run(self._child)

    async def _child(self) -> None:
        """Wait for work, then one child's life (raises ``ChildFailedError``)."""
        loop = asyncio.get_running_loop()
        restarts = self._restarts
        while not self._has_work():
            self._wake.clear()
            await self._wake.wait()
        restarts.started(loop.time())
        # Once it stayed up, a child of a streak ends it and its held stderr is logged.
        up = loop.call_later(STABLE_SECONDS, lambda: self._say_lines(
            restarts.check_up(loop.time())))
        try:
            await self._life()
        except ChildFailedError:
            raise  # said, and waited for, by ``_failed``
        except BaseException:
            self._say_lines(restarts.release())  # a stop: what it said is no crash
            raise
        else:
            self._say_lines(restarts.ended())
        finally:
            up.cancel()

    def _failed(self, e: Exception, _attempts: Attempts) -> float:
        """A child failed: what is said of it, and the pause before the next."""
        fail = self._restarts.failed(asyncio.get_running_loop().time(), time.time(), str(e))
        if fail.said is Said.FULL:
            self._say_lines(fail.stderr)
            again = "" if fail.count == 1 else f" ({fail.count} failures in a row)"
            self.log.warning("kcl %s: %s%s; started again in %.1f s, with back-off "
                             "up to %g s while it fails", self.cfg.stream, e, again,
                             fail.pause, self.cfg.restart_max_seconds)
        elif fail.said is Said.AGAIN:
            self.log.warning("kcl %s: the processor failed again (%d times since "
                             "%s): %s; started again in %.1f s", self.cfg.stream,
                             fail.count, time.strftime("%H:%M:%S",
                                                       time.localtime(fail.since)),
                             e, fail.pause)
        return fail.pause

    async def _life(self) -> None:
        """One child, from initialize to shardEnded, or a failure (raises)."""
        found = self._record()
        assert found is not None
        sid, rec = found
        cfg = self.cfg
        env = {**os.environ, **cfg.env}
        try:
            proc = await asyncio.create_subprocess_exec(
                *cfg.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=cfg.cwd or None,
                start_new_session=True, preexec_fn=self._preexec, limit=MAX_LINE)
        except OSError as e:
            raise ChildFailedError(f"cannot start {cfg.command[0]!r}: {e.strerror or e}"
                               ) from None
        self.starts += 1
        self.pid = proc.pid
        self.log.info("kcl %s: started processor (pid %d) at checkpoint %s", cfg.stream,
                      proc.pid, rec.checkpoint if rec.checkpoint >= 0 else "none")
        errors = asyncio.ensure_future(
            pump_stderr(proc.stderr, lambda texts: self._say_stderr(proc.pid, texts)))
        session = ChildSession(cfg.protocol, cfg.stream, rec.checkpoint)
        self._checkpointed = False
        try:
            await self._act(proc, session, sid, session.initialize())
            while True:
                found = self._record()
                if found is None:
                    raise ChildFailedError("the stream left the state")
                sid, rec = found
                batch = await self._batch(rec, session.delivered)
                if batch:
                    self._ended_seen = False
                    await self._act(proc, session, sid, session.process_records(batch))
                    continue
                if rec.ended and not rec.finished and not self._ended_seen:
                    self._ended_seen = True
                    await self._act(proc, session, sid, session.shard_ended())
                    await self._close(proc)
                    return
                self._wake.clear()
                await self._wake.wait()
        except asyncio.CancelledError:
            await self._shutdown(proc, session, sid)
            raise
        finally:
            await self._close(proc)
            with contextlib.suppress(BaseException):
                # Waited for, not cancelled with this task: the child's last words (a
                # line it wrote with no newline yet) are logged when its stderr ends.
                await asyncio.wait({errors}, timeout=2)

    async def _batch(self, rec: ProcessorRecord, delivered: int) -> list[KclRecord]:
        """Up to ``batch_records`` records after ``delivered``: from the state, or read
        (in a thread) from the staged blocks that hold them.

        Raises:
            ChildFailedError: a staged block is missing or damaged (its line names it);
                the stream goes no further until it is readable.
        """
        limit = self.cfg.batch_records
        if not rec.blocks:
            return rec.after(delivered, limit)
        runs = rec.blocks_after(delivered)
        staging = self.staging

        def read() -> list[KclRecord]:
            out: list[KclRecord] = []
            for run in runs:
                for seq, key, data in read_block(staging, run.ref).messages():
                    if seq > delivered:
                        out.append(KclRecord(seq, key, data, run.arrival_ms))
                        if len(out) == limit:
                            return out
            return out

        try:
            return await asyncio.to_thread(read)
        except (StagingError, ValueError) as err:
            raise ChildFailedError(f"its records cannot be read: {err}") from None

    async def _act(self, proc: asyncio.subprocess.Process, session: ChildSession,
                   sid: int, line: bytes, timeout: float | None = None) -> None:
        """Write one action, then read until its status, answering checkpoints."""
        await self._write(proc, line, session.awaiting)
        await self._finish(proc, session, sid, timeout)

    async def _finish(self, proc: asyncio.subprocess.Process, session: ChildSession,
                      sid: int, timeout: float | None = None) -> None:
        """Read until the status of the action under way, answering checkpoints."""
        action = session.awaiting
        assert proc.stdout is not None
        while True:
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation that meets a line arriving, and a stop would never come.
                async with asyncio.timeout(timeout or self.cfg.timeout_seconds):
                    raw = await proc.stdout.readline()
            except TimeoutError:
                raise ChildFailedError(f"no answer to {action} in "
                                   f"{timeout or self.cfg.timeout_seconds:g} s; killed"
                                   ) from None
            except (ValueError, asyncio.LimitOverrunError):
                raise ChildFailedError(f"a line longer than {MAX_LINE} bytes; killed") from None
            if not raw:
                code = await proc.wait()
                raise ChildFailedError(f"the processor exited (code {code}) during {action}")
            event = session.receive_line(raw)
            match event:
                case None:
                    continue
                case StatusDone():
                    return
                case Skipped(reason):
                    self.log.info("kcl %s: skipped a line: %s", self.cfg.stream, reason)
                case Reply(answer, reason):
                    self.log.warning("kcl %s: %s", self.cfg.stream, reason)
                    await self._write(proc, answer, action)
                case Violation(reason):
                    raise ChildFailedError(f"{reason}; killed")
                case CheckpointAsk(seq, at_end):
                    error = await self._record_checkpoint(sid, seq, at_end)
                    if error:
                        self.log.warning("kcl %s: checkpoint at %d refused (%s)",
                                         self.cfg.stream, seq, error)
                    else:
                        # The first of each child at INFO (it shows the child works),
                        # the rest at DEBUG (one a batch is too many lines).
                        level = logging.DEBUG if self._checkpointed else logging.INFO
                        self._checkpointed = True
                        if at_end:
                            level = logging.INFO
                        self.log.log(level, "kcl %s: checkpoint at %d recorded (pid %d)%s",
                                     self.cfg.stream, seq, proc.pid,
                                     ", at the end of the stream" if at_end else "")
                    await self._write(proc, session.answer(error), action)

    async def _record_checkpoint(self, sid: int, seq: int, at_end: bool) -> str:
        token = self._next_token
        self._next_token += 1
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        try:
            self._send_checkpoint(token, sid, seq, at_end)
        except AmbrosiaError:
            return SHUTDOWN  # the instance stopped taking Impulses: nothing is recorded
        self._answers[token] = self._pending = fut
        # Shielded: an ordinary stop cancels this task, and the answer may still come.
        answer = await asyncio.shield(fut)
        self._pending = None
        return answer

    async def _pending_answer(self, proc: asyncio.subprocess.Process) -> str:
        """The verdict on the checkpoint under way when an ordinary stop came: it may
        still be recorded, for up to ``shutdown_seconds``."""
        fut, self._pending = self._pending, None
        error = SHUTDOWN
        if fut is not None:
            with contextlib.suppress(TimeoutError):  # a second cancel goes on up
                async with asyncio.timeout(self.cfg.shutdown_seconds):
                    error = await fut
        self.log.info("kcl %s: the checkpoint under way at the stop %s (pid %d)",
                      self.cfg.stream, f"refused ({error})" if error else "recorded", proc.pid)
        return error

    async def _write(self, proc: asyncio.subprocess.Process, line: bytes, action: str) -> None:
        """Write to the child during ``action``: a child gone is said as by ``_finish``, so
        the same crash gives the same reason whether a write or a read meets it."""
        assert proc.stdin is not None
        try:
            write_unless_closing(proc.stdin, line)
            await proc.stdin.drain()
        except (ConnectionError, OSError):
            code = await proc.wait()
            raise ChildFailedError(f"the processor exited (code {code}) during {action}"
                                   ) from None

    async def _shutdown(self, proc: asyncio.subprocess.Process, session: ChildSession,
                        sid: int) -> None:
        """The instance stops: the action under way may finish, then the end, each within
        ``shutdown_seconds``: ``shutdownRequested`` on an ordinary stop, ``leaseLost``
        (the older protocol: ``shutdown`` ZOMBIE) when the coordinator is gone and the
        stream moves to another primary. After leaseLost every checkpoint (one waiting
        for its Impulse too) is refused with ShutdownException; on an ordinary stop they
        are recorded while the log still takes Impulses. The records after the last
        recorded checkpoint come again in the next life."""
        if proc.returncode is not None:
            return
        grace = self.cfg.shutdown_seconds
        lost = self._stop_reason() is not StopReason.STOPPED
        # An ordinary stop may still record checkpoints: the runner logs Impulses until
        # the side effects end (if its log has closed, the Impulse is refused).
        session.stopping = lost
        try:
            if session.asking:
                error = SHUTDOWN if lost else await self._pending_answer(proc)
                await self._write(proc, session.answer(error), session.awaiting)
            if session.awaiting:
                await self._finish(proc, session, sid, timeout=grace)
            end = session.lease_lost() if lost else session.shutdown_requested()
            self.log.info("kcl %s: %s: %s to the processor (pid %d)", self.cfg.stream,
                          "the coordinator is gone" if lost else "the instance stops",
                          session.awaiting, proc.pid)
            await self._act(proc, session, sid, end, timeout=grace)
        except (ChildFailedError, OSError) as e:
            self.log.warning("kcl %s: at the stop: %s", self.cfg.stream, e)
        except asyncio.CancelledError:
            # Cancelled again, the runner ends: no more grace, nothing more recorded.
            if session.asking:
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    assert proc.stdin is not None
                    write_unless_closing(proc.stdin, session.answer(SHUTDOWN))

    async def _close(self, proc: asyncio.subprocess.Process) -> None:
        """Close stdin (amazon-kclpy exits at its end), wait a moment, then kill."""
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()
            try:
                async with asyncio.timeout(1.0):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for fut in self._answers.values():
            fut.cancel()
        self._answers.clear()

    def _say_stderr(self, pid: int, texts: Sequence[str]) -> None:
        for text in texts:
            self._say_lines(self._restarts.stderr(f"kcl {self.cfg.stream} (pid {pid}): {text}"))

    def _say_lines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.log.info("%s", line)

    def report(self) -> dict[str, Any]:
        """The processor's live counters, for the status file."""
        return {"pid": self.pid, "starts": self.starts,
                "failures_in_a_row": self._restarts.failures,
                "last_failure": self._restarts.last_failure}
