"""``ConnectorCoordinator``: the exactly-once connector coordinator as an immortal.

Sources (connectors) send MESSAGEs; the primary's listener turns them into batched
``receive`` Impulses; the handler applies each message once (``core``), hands applied
messages to the output hook (``on_messages``), and only then may the listener ACK them.
Output for sinks waits in the state until a sink votes yes on a transaction covering it.
All network I/O lives in ``live.Live``, started in ``on_become_primary`` with
``ctx.run_effects``: the framework wakes it after every run of inputs applied, so it acts
on what the handlers decided; its outcomes come back as Impulses.

A live upgrade to a next version that keeps the state as it is (a subclass that changes
only code) needs no conversion: ``Immortal.upgrade_from`` carries the whole state, the
streams, sinks and whatever a subclass added. The new instance is built while the
upgrading process is still recovering, so its own ``on_become_primary`` starts the network
I/O bound to it; nothing of the old instance's I/O lives on.

Run: ``ambrosia run connectors -i NAME --config FILE``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import attrs

from ambrosia_core.errors import UsageError
from ambrosia_core.metrics import Families
from ambrosia_core.tls import CONFIG_REMEDY
from ambrosia_py import Immortal, impulse, rpc
from ambrosia_services.staging import Ref

from .config import CoordinatorConfig, CoordinatorConfigError
from .core import Applied, ConnectorCore, Incoming, IncomingRef
from .live import Live

__all__ = ["ConnectorCoordinator"]


@attrs.frozen
class _ConfigOnly:
    """The runtime of an instance made only to read a configuration: it offers nothing
    else (an instance that asks it for more fails at once)."""

    config: Mapping[str, Any]


class ConnectorCoordinator(Immortal):
    """Takes source streams in, applies each message once, commits output to sinks once.

    Subclasses decide what applied messages produce by overriding ``on_messages`` and
    calling ``emit``; the default copies each payload to every configured sink.
    """

    version = 0
    #: ``ambrosia run`` gives an instance of a class that says so a ``status_file`` in its
    #: instance directory when its configuration names none, where ``ambrosia status``
    #: looks (``ambrosia_cli.status``); other immortals' configurations are left alone.
    default_status_file: ClassVar[bool] = True

    def __init__(self) -> None:
        self.core = ConnectorCore()
        self._live: Live | None = None  # the primary's I/O; never part of the state

    # ------------------------------------------------------------ the output hook
    def on_messages(self, stream_id: int, messages: Sequence[Applied]) -> None:
        """Called (in a handler, deterministically) with each run of applied messages of
        one stream, in apply order. The identity route: every payload to every sink."""
        for name in self.core.settings["sinks"]:
            self.emit(name, b"".join(m.payload for m in messages))

    def emit(self, sink: str, data: bytes) -> None:
        """Append ``data`` to ``sink``'s output (only from ``on_messages`` or another
        handler). It is committed once, after everything emitted before it."""
        self.core.emit(sink, data, self._now_ns())

    def on_end_of_stream(self, stream_id: int) -> None:
        """Called (in a handler, deterministically) when a stream's EOS was applied."""

    #: A subclass that can only take staged runs (``on_staged``) says so: it runs only
    #: with a staging root (``staging``). The identity route works either way.
    uses_staging: ClassVar[bool] = False

    def on_staged(self, stream_id: int, refs: Sequence[Ref]) -> None:
        """Called (in a handler, deterministically) with each run of applied staged blocks
        of one stream, in apply order, when the coordinator stages what it receives
        (``staging``). Each block is held (counted in the backlog, its segment kept)
        until ``release`` is called with it. The identity route: every block to every
        sink as it is (the sink's link reads it from its segment; the sink holds it until
        it commits it)."""
        now = self._now_ns()
        for name in self.core.settings["sinks"]:
            for ref in refs:
                self.core.emit_staged(name, ref, now)
        self.core.release(refs)

    @classmethod
    def _keeps_payloads(cls) -> bool:
        """Whether the class routes payloads itself (``on_messages``) but not staged
        blocks: it cannot run with a staging root."""
        return (cls.on_messages is not ConnectorCoordinator.on_messages
                and cls.on_staged is ConnectorCoordinator.on_staged)

    def release(self, refs: Sequence[Ref]) -> None:
        """Let staged blocks go (only in a handler): nothing will read them again."""
        self.core.release(refs)

    # ------------------------------------------------------------ lifecycle
    #: A subclass whose output can only go to sinks says so: started with none, it refuses.
    needs_sinks: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """Whatever ``on_become_primary`` would refuse ``config`` for, refused before
        anything is written (``Immortal.check_config``). The configuration is read by an
        instance of this class made for that alone, so a subclass's own reading of its
        part (``coordinator_config``) is the one checked."""
        probe = cls()
        probe.__ambrosia_attach__(cast(Any, _ConfigOnly(config)), "(configuration check)",
                                  logging.LoggerAdapter(logging.getLogger(__name__)))
        probe.primary_config()

    def primary_config(self) -> CoordinatorConfig:
        """``coordinator_config`` as the primary needs it: staging and sinks as this class
        uses them, TLS files that load, and no listener beyond loopback without TLS
        (unless ``insecure``). Reads files, opens no socket.

        Raises:
            CoordinatorConfigError: one line naming the key.
        """
        cfg = self.coordinator_config()
        if self.uses_staging and not cfg.staging:
            raise CoordinatorConfigError(f"staging: {type(self).__name__} reads what it "
                                         "receives from staged segments; name a staging root")
        if cfg.staging and self._keeps_payloads():
            raise CoordinatorConfigError(f"staging: {type(self).__name__} keeps payloads in "
                                         "its state and cannot stage them; remove the key")
        if not cfg.sinks and self.needs_sinks:
            raise CoordinatorConfigError(
                f"sinks: {type(self).__name__} commits its output to sinks and none is "
                "configured (a [sinks] table of NAME = \"host:port\")")
        try:  # (the listener applies the rule again, and logs `insecure` there)
            cfg.tls.check_listen(cfg.listen_address.host, "the source listener",
                                 lambda _line: None, remedy=CONFIG_REMEDY)
        except UsageError as err:
            raise CoordinatorConfigError(f"listen: {err}") from None
        cfg.load_tls()
        return cfg

    def on_become_primary(self) -> None:
        # A bad configuration stops the instance with its one-line error (`ambrosia run`
        # refused it before anything started: see check_config).
        cfg = self.primary_config()
        if not cfg.sinks:
            self.ctx.log.warning("no sinks are configured ([sinks]): output is committed "
                                 "nowhere")
        if "listen" not in self.ctx.config:
            self.ctx.log.info("no listen key: sources connect to the default %s",
                              cfg.listen_address)
        wanted = cfg.decision_part()
        if wanted != self.core.settings or self.core.instance != self.ctx.instance_name:
            # Configuration is outside-world input: it reaches the state as an Impulse,
            # sent before any Impulse of the transports, so it is applied first.
            self.impulse_self.configure(wanted)
        self._live = Live(self, cfg)
        self.ctx.run_effects(self._live)

    def coordinator_config(self) -> CoordinatorConfig:
        """This coordinator's part of ``ctx.config`` (a subclass with keys of its own
        takes them out first)."""
        return CoordinatorConfig.from_mapping(self.ctx.config)

    def checkpoint_state(self) -> Any:
        return self.core.to_state()

    def load_state(self, state: Any) -> None:
        self.core = ConnectorCore.from_state(state)

    # ------------------------------------------------------------ inputs
    @impulse
    def configure(self, settings: dict[str, Any]) -> None:
        self.core.configure(settings, self.ctx.instance_name)
        self.ctx.log.info("configured: sinks %s, interval %d bytes / %ss",
                          ", ".join(self.core.settings["sinks"]) or "none",
                          self.core.settings["interval_bytes"],
                          self.core.settings["interval_seconds"])

    @impulse
    def receive(self, token: int, batch: list[Incoming]) -> None:
        """A batch of MESSAGEs from the listener; ``token`` names it for the ACKs."""
        for stream_id, messages in self.core.receive(batch):
            self.on_messages(stream_id, messages)
        self.core.cut_due(self._now_ns())
        if self._live is not None and self._is_live():
            self._live.applied(token)

    @impulse
    def receive_staged(self, token: int, batch: list[IncomingRef]) -> None:
        """A batch of staged runs from the listener (references, not bytes)."""
        for stream_id, refs in self.core.receive_staged(batch):
            self.on_staged(stream_id, refs)
        self.core.cut_due(self._now_ns())
        if self._live is not None and self._is_live():
            self._live.applied(token)

    @impulse
    def end_of_stream(self, token: int, stream_id: int) -> None:
        self.core.end_of_stream(stream_id)
        self.on_end_of_stream(stream_id)
        if self._live is not None and self._is_live():
            self._live.applied(token)

    @impulse
    def sink_uncommitted(self, sink: str, rtag: int, txn_ids: list[str]) -> None:
        self.core.sink_uncommitted(sink, rtag, txn_ids, self._now_ns())
        self.on_committed()

    @impulse
    def sink_voted(self, sink: str, txn_id: str, commit: bool) -> None:
        self.core.sink_voted(sink, txn_id, commit, self._now_ns())
        self.on_committed()

    def on_committed(self) -> None:
        """Called (in a handler) after a sink's transaction was decided: a subclass that
        waits for its output to be committed looks at ``core.sinks[...].committed``."""

    @impulse
    def tick(self) -> None:
        self.core.tick(self._now_ns())

    @rpc
    async def status(self) -> dict[str, Any]:
        """Per stream (applied, point of reference, closed) and per sink (committed
        offset, pending bytes, transaction in flight, commits, aborts): state only."""
        return self.state_status()

    def state_status(self) -> dict[str, Any]:
        """The status derived from the state alone (a subclass adds its own parts)."""
        return self.core.status()

    def live_status(self) -> dict[str, Any]:
        """Live counters of the primary's own I/O, for the status file (a subclass with
        I/O of its own adds them)."""
        return {}

    def live_metrics(self, f: Families) -> None:
        """A subclass's own metrics, added at each scrape while primary in a process that
        serves metrics (``ambrosia run --metrics``). It runs on the exposition server's
        thread: read counters, and copy a dict or list before iterating it."""

    # ------------------------------------------------------------ helpers
    def _now_ns(self) -> int:
        return int(self.ctx.now().timestamp() * 1e9)

    def _is_live(self) -> bool:
        return self.ctx.is_primary and not self.ctx.is_replaying
