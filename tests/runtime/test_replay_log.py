"""What a server logs about its handlers, live and on replay, as `ambrosia run` prints it:
an @rpc error its class does not declare is logged with its traceback on the callee; lines
logged by replayed handlers are quiet by default and marked with AMBROSIA_LOG_REPLAY=1.
The engine setting and ``ctx.log_replay`` against an in-memory coordinator."""

from __future__ import annotations

import logging
import os

import pytest

from ambrosia_py.runtime.engine import Engine
from ambrosia_py.testing.inmemory import InMemoryCoordinator
from tests.launcher import Launcher

from .apps import Clocked

pytestmark = pytest.mark.integration

CALC = "tests.runtime.apps:Calculator"
STORED = "calc: stored Entry(n=21, note='hi')"
FAILED = ("fail failed (called by caller, call 4; not in remote_errors, so the caller gets a "
          "RemoteCallError)")


def _env(log_replay: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AMBROSIA_LOG_REPLAY"}
    if log_replay is not None:
        env["AMBROSIA_LOG_REPLAY"] = log_replay
    return env


def _message(line: str) -> str:
    """A log line without its time stamp and logger name."""
    return line.split(" ambrosia.calc: ", 1)[1] if " ambrosia.calc: " in line else line


def _run_calls_then_restart_calc(launcher: Launcher, log_replay: str | None
                                 ) -> tuple[list[str], list[str]]:
    calc = launcher.start(CALC, "calc", env=_env(None))
    caller = launcher.start("tests.runtime.apps:Caller", "caller")
    caller.wait_for("caller: done")
    calc.wait_for(FAILED, timeout=30)
    calc.kill()
    caller.stop()
    again = launcher.start(CALC, "calc", env=_env(log_replay))
    again.wait_for("became primary after recovery")
    again.stop()
    return calc.lines, again.lines


def test_an_undeclared_rpc_error_is_logged_on_the_callee_with_its_traceback(
        launcher: Launcher) -> None:
    live, replay = _run_calls_then_restart_calc(launcher, None)
    messages = [_message(ln) for ln in live]
    (i,) = [k for k, m in enumerate(messages) if m.startswith(FAILED)]
    assert messages[i] == FAILED
    assert messages[i + 1] == "Traceback (most recent call last):"
    assert "KeyError: 'nope'" in messages[i + 2:i + 12]
    assert any("in fail" in m for m in messages[i + 2:i + 12])
    # ZeroDivisionError is in Calculator.remote_errors: the caller handles it, no log.
    assert not any("divide failed" in m for m in messages)
    assert messages.count(STORED) == 1
    # The restart replays those handlers without printing their lines again.
    assert any("recovery complete: 5 messages replayed" in ln for ln in replay)
    assert not any(STORED in ln or FAILED in ln or "KeyError" in ln for ln in replay)


@pytest.mark.parametrize("switch", ["1", "true"])
def test_with_ambrosia_log_replay_replayed_lines_are_shown_marked(
        launcher: Launcher, switch: str) -> None:
    _, replay = _run_calls_then_restart_calc(launcher, switch)
    messages = [_message(ln) for ln in replay]
    assert messages.count(f"[replay] {STORED}") == 1
    assert messages.count(f"[replay] {FAILED}") == 1
    assert "KeyError: 'nope'" in messages
    assert not any(STORED in m and not m.startswith("[replay] ") for m in messages)


def _replay_messages(caplog: pytest.LogCaptureFixture, **engine_kw: object) -> list[str]:
    """Clocked's live run, then a replay of its log by a new engine; the replay's lines."""
    live = InMemoryCoordinator(Engine(Clocked, "me"))
    live.first_start()
    caplog.clear()
    again = InMemoryCoordinator(Engine(Clocked, "me", **engine_kw))  # type: ignore[arg-type]
    again.recover(live.checkpoints[0], list(live.log))
    return [r.getMessage() for r in caplog.records if "sampled" in r.getMessage()]


def test_the_engine_setting_overrides_the_environment(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("AMBROSIA_LOG_REPLAY", "1")
    assert _replay_messages(caplog, log_replay=False) == []
    monkeypatch.delenv("AMBROSIA_LOG_REPLAY")
    assert _replay_messages(caplog, log_replay=True) == [
        "[replay] sampled 1", "[replay] sampled 2", "[replay] sampled 3"]
    assert _replay_messages(caplog) == []


def test_ctx_log_replay_switches_it_from_the_immortal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    live = InMemoryCoordinator(Engine(Clocked, "me"))
    live.first_start()
    eng = Engine(Clocked, "me", log_replay=False)
    again = InMemoryCoordinator(eng)
    again.recover(live.checkpoints[0], [], primary=False)
    assert eng.instance is not None and not eng.instance.ctx.log_replay
    eng.instance.ctx.log_replay = True
    assert eng.log_replay
    caplog.clear()
    for record in live.log:
        again.record(record)
    assert [r.getMessage() for r in caplog.records if "sampled" in r.getMessage()] == [
        "[replay] sampled 1", "[replay] sampled 2", "[replay] sampled 3"]
