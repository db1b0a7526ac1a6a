"""Logging that knows about replay.

Replay runs handlers again, so every line a handler logs would be printed again on each
recovery, looking like a duplicate delivery. ``ReplayAwareLogger`` (what ``self.ctx.log``
is) drops lines logged while a replayed input is handled, unless replay logging is on; then
it marks them with ``[replay] ``. Lifecycle hooks that run once per life (loading a
checkpoint, recovery complete, becoming primary) log as usual. Replay logging is on when
the engine is built with ``log_replay=True`` or, by default, when the environment variable
``AMBROSIA_LOG_REPLAY`` is ``1`` (or ``true``/``yes``/``on``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from ambrosia_core.errors import AmbrosiaError

__all__ = ["LOG_REPLAY_ENV", "REPLAY_MARK", "ReplayAwareLogger", "declared",
           "log_replay_from_env", "log_rpc_failure"]

LOG_REPLAY_ENV = "AMBROSIA_LOG_REPLAY"
REPLAY_MARK = "[replay] "
_TRUE = frozenset({"1", "true", "yes", "on"})


def log_replay_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``AMBROSIA_LOG_REPLAY`` asks for replayed log lines to be shown."""
    env = os.environ if environ is None else environ
    return env.get(LOG_REPLAY_ENV, "").strip().lower() in _TRUE


class ReplayAwareLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose lines are dropped during replay, or marked ``[replay] `` when
    ``show_replay()`` is true.

    Args:
        logger: where lines go.
        is_replaying: whether the input being handled is a replay.
        show_replay: whether replayed lines are shown (marked) rather than dropped.
    """

    def __init__(self, logger: logging.Logger, is_replaying: Callable[[], bool],
                 show_replay: Callable[[], bool]) -> None:
        super().__init__(logger, {})
        self._is_replaying = is_replaying
        self._show_replay = show_replay

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if self._is_replaying():
            if not self._show_replay():
                return
            msg = f"{REPLAY_MARK}{msg}"
        # Skip this method's frame: the line's source is the caller of info()/error().
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        super().log(level, msg, *args, **kwargs)


def declared(error: BaseException, remote_errors: tuple[type[BaseException], ...]) -> bool:
    """Whether the caller re-raises ``error`` as itself: callers match by class name."""
    return any(type(error).__name__ == t.__name__ for t in remote_errors)


def log_rpc_failure(log: ReplayAwareLogger, method: str, caller: str, call_id: Any,
                    error: BaseException, *, posted: bool = False) -> None:
    """Log, on the callee, an error its caller will receive: an ``@rpc``'s exception that
    its class does not declare in ``remote_errors`` (the caller gets ``RemoteCallError``),
    or any error answering an AmbrosiaJS post (``posted``: the caller gets ``errorMsg``).
    With its traceback, unless it is one of the framework's own one-line errors."""
    exc_info = None if isinstance(error, AmbrosiaError) else error
    suffix = "" if exc_info is not None else f": {type(error).__name__}: {error}"
    how = ("posted by %s, call %s; the caller gets its errorMsg" if posted else
           "called by %s, call %s; not in remote_errors, so the caller gets a "
           "RemoteCallError")
    log.error(f"%s failed ({how})%s", method, caller or "?", call_id, suffix,
              exc_info=exc_info)
