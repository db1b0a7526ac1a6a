"""What a server logs about its handlers, live and on replay, as `ambrosia run` prints it:
an @rpc error its class does not declare is logged with its traceback on the callee; lines
logged by replayed handlers are quiet by default and marked with AMBROSIA_LOG_REPLAY=1."""

from __future__ import annotations

import os

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration

CALC = "tests.framework.apps:Calculator"
STORED = "calc: stored Entry(n=21, note='hi')"
FAILED = ("fail failed (called by caller, call 4), not one of its remote_errors")


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
    caller = launcher.start("tests.framework.apps:Caller", "caller")
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
    assert any("recovery complete: 5 records replayed" in ln for ln in replay)
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
