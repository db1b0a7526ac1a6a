"""The job table and the word count's handlers, driven as logged inputs with no Spark:
attempts only rise, re-sent batches are dropped, results leave in batch order, batches
are cut adaptively from staged runs and released once committed, and a replay of the log
rebuilds the same state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ambrosia_services.connectors.coordinator import CoordinatorConfigError
from ambrosia_services.pipeline import JobPhase, JobTable, WordCountPipeline, format_batch, words
from ambrosia_services.staging import Ref, SegmentWriter, read_payloads

from ambrosia_py.testing.inmemory import InMemoryCoordinator

SETTINGS = {"runners": ["127.0.0.1:7101", "127.0.0.1:7102"], "max_attempts": 2,
            "batch_lines": 3, "batch_seconds": 1.0, "jobs_in_flight": 10}


def table() -> JobTable:
    t = JobTable()
    t.configure("wc", SETTINGS)
    return t


def test_words_are_runs_of_ascii_letters_lowered() -> None:
    assert words("Don't stop-2-GO!") == ["don", "t", "stop", "go"]
    assert words("Ärger über straße") == ["rger", "ber", "stra", "e"]
    assert words("  42 \t") == []


def test_keys_and_attempts_come_from_the_state_and_attempts_only_rise() -> None:
    t = table()
    a, b = t.submit("wordcount", {"lines": ["x"]}), t.submit("wordcount", {})
    assert (a, b) == ("wc-1", "wc-2")
    assert [t.jobs[a].local_id, t.jobs[b].local_id] == [0, 1]
    assert t.runner_of(a) == "127.0.0.1:7101"  # (1 + 1) % 2
    assert not t.failed(a, 0, "boom")  # attempt 2 decided, on the other runner
    assert (t.jobs[a].attempt, t.jobs[a].local_id) == (2, 2)
    assert t.runner_of(a) == "127.0.0.1:7102"
    assert t.cancels == [0]  # the failed start is cancelled at its runner
    t.lost(a, 2, same_attempt=True)  # committed output: the same attempt, a new start
    assert (t.jobs[a].attempt, t.jobs[a].local_id) == (2, 3)
    t.lost(a, 2, same_attempt=False)  # an old start: changes nothing
    assert (t.jobs[a].attempt, t.jobs[a].local_id) == (2, 3)
    assert t.failed(a, 3, "boom again")  # the second attempt was the last
    assert a not in t.jobs and t.counts["failed"] == 1
    assert t.status()["recent"][-1] == ["wc-1", "failed", 2, "boom again"]


def test_a_result_sent_again_from_batch_zero_is_kept_once() -> None:
    t = table()
    key = t.submit("wordcount", {})
    assert t.batch(key, 0, 0, b'{"word":"a","count":1}\n', False) is None
    assert t.batch(key, 0, 0, b'{"word":"a","count":1}\n', False) is None  # again: dropped
    assert t.batch(key, 0, 2, b"x", True) is None  # skips ahead: dropped
    assert t.batch(key, 7, 1, b"x", True) is None  # another start's: dropped
    assert t.jobs[key].phase is JobPhase.RUNNING
    done = t.batch(key, 0, 1, b'{"word":"b","count":2}\n', True)
    assert done == b'{"word":"a","count":1}\n{"word":"b","count":2}\n'
    assert t.batch(key, 0, 2, b"late", True) is None and t.counts["done"] == 1


def test_the_table_survives_its_state_form() -> None:
    t = table()
    key = t.submit("wordcount", {"lines": ["a b"]})
    t.batch(key, 0, 0, b"part", False)
    t.submit("other", {})
    t.cancel("wc-2", "asked")
    again = JobTable.from_state(t.to_state())
    assert again.to_state() == t.to_state()


# ---------------------------------------------------------------- handlers, as logged


class Stager:
    """Stages lines as the source listener would (one block per call) and makes the
    ``receive_staged`` Impulse's argument."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.writer = SegmentWriter(root, "test", segment_bytes=4096)
        self.next_id = 1

    def run(self, texts: list[str], stream: int = 5) -> list[Any]:
        first = self.next_id
        self.next_id += len(texts)
        ref = self.writer.append(stream, first, self.next_id - 1,
                                 [f"{t}\n".encode() for t in texts])
        self.writer.sync()
        return ["five", *ref.to_list()]

    def lines_of(self, refs: list[list[Any]]) -> list[str]:
        payloads = read_payloads(self.root, [Ref.from_list(r) for r in refs])
        return [p.decode().rstrip("\n") for p in payloads]


@pytest.fixture
def stager(tmp_path: Path) -> Stager:
    return Stager(tmp_path / "staging")


@pytest.fixture
def coordinator(stager: Stager) -> Iterator[InMemoryCoordinator]:
    """A word count instance with one sink whose primary I/O never runs during the test
    (its job decisions are driven by the test's Impulses, as its links would send them)."""
    loop = asyncio.new_event_loop()
    ic = InMemoryCoordinator(WordCountPipeline, "wc", config={
        "listen": "127.0.0.1:0", "sinks": {"out": "127.0.0.1:9"}, "interval_bytes": 1,
        "runners": SETTINGS["runners"], "out": "/nonexistent",
        "staging": str(stager.root)})
    ic.engine.attach(loop, lambda: None)
    ic.first_start()
    ic.deliver_self()  # the configure Impulse
    ic.send("configure_jobs", {**SETTINGS, "staging": str(stager.root)})
    ic.stager = stager  # type: ignore[attr-defined]
    yield ic
    # The primary's I/O was spawned on the loop: start it, then stop it.
    loop.run_until_complete(asyncio.sleep(0.05))
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


def receive(ic: InMemoryCoordinator, *runs: list[str]) -> None:
    """One ``receive_staged`` Impulse per run of lines (each run one staged block)."""
    stager: Stager = ic.stager  # type: ignore[attr-defined]
    for run in runs:
        ic.send("receive_staged", 1, [stager.run(run)])


def lines(*texts: str) -> list[list[str]]:
    """Each line a block of its own."""
    return [[t] for t in texts]


def rows(counts: dict[str, int]) -> bytes:
    return b"".join(json.dumps({"word": w, "count": c}).encode() + b"\n"
                    for w, c in counts.items())


def test_batches_are_cut_submitted_and_emitted_in_order(
        coordinator: InMemoryCoordinator) -> None:
    ic = coordinator
    app: WordCountPipeline = ic.instance
    stager: Stager = ic.stager  # type: ignore[attr-defined]
    receive(ic, ["The cat", "the DOG"])
    assert app.cut == 0 and app.pending_lines == 2  # fewer than batch_lines wait
    receive(ic, ["a cat"], ["one more"])
    assert app.cut == 1 and app.pending_lines == 1
    args = app.jobs.jobs["wc-1"].args
    assert args["staging"] == str(stager.root) and len(args["refs"]) == 2
    assert stager.lines_of(args["refs"]) == ["The cat", "the DOG", "a cat"]
    receive(ic, ["x y"], ["y"])
    assert app.cut == 2 and sorted(app.jobs.jobs) == ["wc-1", "wc-2"]
    assert stager.lines_of(app.jobs.jobs["wc-2"].args["refs"]) == ["one more", "x y", "y"]
    # Batch 2's job finishes first: it waits for batch 1.
    ic.send("job_batch", "wc-2", 1, 0, rows({"y": 2, "x": 1, "one": 1, "more": 1}), True)
    assert bytes(app.core.sinks["out"].pending) == b""
    ic.send("job_batch", "wc-1", 0, 0, rows({"the": 2, "cat": 2}), False)
    ic.send("job_batch", "wc-1", 0, 0, rows({"the": 2, "cat": 2}), False)  # sent again
    ic.send("job_batch", "wc-1", 0, 1, rows({"dog": 1, "a": 1}), True)
    assert bytes(app.core.sinks["out"].pending) == (
        b"#batch\t1\t3\t6\na\t1\ncat\t2\ndog\t1\nthe\t2\n"
        b"#batch\t2\t3\t5\nmore\t1\none\t1\nx\t1\ny\t2\n")
    assert app.state_status()["jobs"]["done"] == 2
    assert app.state_status()["batches"] == {
        "cut": 2, "emitted": 2, "waiting": 0, "running": 0, "pending_lines": 0,
        "pending_bytes": 0, "uncommitted": 2}


def test_a_job_failing_every_attempt_reaches_on_job_failed_once(
        coordinator: InMemoryCoordinator) -> None:
    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"], ["d", "e", "f"])
    ic.send("job_failed", "wc-1", 0, "JOB_FAILED: boom")
    assert app.jobs.jobs["wc-1"].attempt == 2
    ic.send("job_failed", "wc-1", 0, "JOB_FAILED: boom")  # the old attempt's: ignored
    ic.send("job_batch", "wc-2", 1, 0, rows({"d": 1, "e": 1, "f": 1}), True)
    ic.send("job_failed", "wc-1", 2, "JOB_FAILED: boom again")
    assert "wc-1" not in app.jobs.jobs
    assert bytes(app.core.sinks["out"].pending) == (
        b"#failed\t1\t3\n" + format_batch(2, 3, [("d", 1), ("e", 1), ("f", 1)]))
    status = app.state_status()["jobs"]
    assert (status["failed"], status["done"], status["attempts"]) == (1, 1, 3)


def test_cancel_through_the_coordinator_records_the_start_to_cancel(
        coordinator: InMemoryCoordinator) -> None:
    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"])
    ic.send("cancel", "wc-1", "not wanted")
    assert app.jobs.cancels == [0] and app.jobs.counts["cancelled"] == 1
    ic.send("job_batch", "wc-1", 0, 0, rows({"a": 1}), True)  # too late: dropped
    assert app.jobs.counts["done"] == 0


def test_a_replay_of_the_log_rebuilds_the_same_state(
        coordinator: InMemoryCoordinator) -> None:
    ic = coordinator
    receive(ic, ["a b", "b c", "c d"], ["d e"])
    ic.send("job_batch", "wc-1", 0, 0, rows({"a": 1}), False)
    ic.send("job_lost", "wc-1", 0, False, "unknown")
    ic.send("job_tick")  # too young by logged time: nothing cut
    checkpoint, logged = ic.checkpoints[0], list(ic.log[1:])
    again = InMemoryCoordinator(WordCountPipeline, "wc")
    again.recover(checkpoint, logged, primary=False)
    assert again.instance.checkpoint_state() == ic.instance.checkpoint_state()
    assert again.instance.jobs.jobs["wc-1"].attempt == 2


def test_a_result_that_is_not_json_lines_fails_the_job(
        coordinator: InMemoryCoordinator) -> None:
    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"])
    ic.send("job_batch", "wc-1", 0, 0, b"{not json\n", True)
    assert bytes(app.core.sinks["out"].pending) == b"#failed\t1\t3\n"


def test_the_word_count_refuses_to_start_without_runners() -> None:
    loop = asyncio.new_event_loop()
    ic = InMemoryCoordinator(WordCountPipeline, "wc", config={"listen": "127.0.0.1:0"})
    ic.engine.attach(loop, lambda: None)
    with pytest.raises(CoordinatorConfigError, match="needs at least one job runner"):
        ic.first_start()
    loop.close()


def job_counts(app: WordCountPipeline) -> tuple[int, ...]:
    s = app.state_status()["jobs"]
    return (s["decided"], s["waiting"], s["running"], s["done"], s["failed"], s["cancelled"],
            s["attempts"])


def test_the_job_counts_are_exact_through_retries_losses_and_completion(
        coordinator: InMemoryCoordinator) -> None:
    """(decided, waiting, running, done, failed, cancelled, attempts) after each input:
    waiting + running + the ended always make up the decided, and a start the runner took
    is running, not waiting."""
    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"])
    assert job_counts(app) == (3, 3, 0, 0, 0, 0, 3)
    ic.send("job_started", "wc-1", 0)
    ic.send("job_started", "wc-2", 1)
    ic.send("job_started", "wc-2", 1)  # said twice (launch, then a runner's check)
    assert job_counts(app) == (3, 1, 2, 0, 0, 0, 3)
    ic.send("job_failed", "wc-1", 0, "JOB_FAILED: boom")  # attempt 2 decided, not started
    assert job_counts(app) == (3, 2, 1, 0, 0, 0, 4)
    ic.send("job_started", "wc-1", 0)  # the failed start's: changes nothing
    assert job_counts(app) == (3, 2, 1, 0, 0, 0, 4)
    ic.send("job_started", "wc-1", 3)
    assert job_counts(app) == (3, 1, 2, 0, 0, 0, 4)
    ic.send("job_lost", "wc-2", 1, True, "finished staging")  # same attempt, new start
    assert job_counts(app) == (3, 2, 1, 0, 0, 0, 4)
    ic.send("job_lost", "wc-3", 2, False, "unknown")  # a new attempt of a waiting job
    assert job_counts(app) == (3, 2, 1, 0, 0, 0, 5)
    ic.send("job_batch", "wc-2", 4, 0, rows({"d": 1, "e": 1, "f": 1}), True)
    assert job_counts(app) == (3, 1, 1, 1, 0, 0, 5)
    ic.send("job_batch", "wc-1", 3, 0, rows({"a": 1}), False)
    ic.send("job_batch", "wc-1", 3, 1, rows({"b": 1, "c": 1}), True)
    assert job_counts(app) == (3, 1, 0, 2, 0, 0, 5)
    ic.send("job_batch", "wc-3", 5, 0, b"{not json\n", True)  # unreadable: failed
    assert job_counts(app) == (3, 0, 0, 2, 1, 0, 5)
    receive(ic, ["j", "k", "l"])
    ic.send("cancel", "wc-4", "not wanted")
    assert job_counts(app) == (4, 0, 0, 2, 1, 1, 6)
    assert bytes(app.core.sinks["out"].pending).count(b"#batch\t") == 2


def test_an_unknown_key_is_refused_naming_the_pipelines_own_keys_among_the_known() -> None:
    from ambrosia_services.pipeline.config import PipelineConfig

    with pytest.raises(CoordinatorConfigError) as info:
        PipelineConfig.from_mapping({"batch_line": 5})
    message = str(info.value)
    assert message.startswith("unknown configuration key(s) batch_line (known: listen, ")
    assert message.endswith(", runners, out, max_attempts, batch_lines, batch_seconds, "
                            "job_timeout_seconds, jobs_in_flight, max_batch_lines, "
                            "max_batch_bytes)")


def test_a_key_that_is_fixed_now_is_refused_in_one_line_naming_it() -> None:
    from ambrosia_services.pipeline.config import PipelineConfig

    with pytest.raises(CoordinatorConfigError) as info:
        PipelineConfig.from_mapping({"segment_bytes": 1 << 20, "batch_lines": 5})
    assert str(info.value) == ("segment_bytes is no longer a configuration key: a staged "
                               "segment is closed at 64 MiB (fixed); remove it")


@pytest.mark.parametrize(("key", "value"), [("batch_lines", 0), ("max_attempts", True),
                                            ("jobs_in_flight", 1.0), ("max_batch_bytes", "5")])
def test_a_count_that_is_not_a_positive_integer_is_refused_naming_its_key(
        key: str, value: object) -> None:
    from ambrosia_services.pipeline.config import PipelineConfig

    with pytest.raises(CoordinatorConfigError) as info:
        PipelineConfig.from_mapping({key: value})
    assert str(info.value) == f"{key} must be an integer >= 1, got {value!r}"


def test_the_word_count_refuses_to_start_without_sinks() -> None:
    loop = asyncio.new_event_loop()
    ic = InMemoryCoordinator(WordCountPipeline, "wc", config={
        "listen": "127.0.0.1:0", "runners": SETTINGS["runners"], "out": "/nonexistent"})
    ic.engine.attach(loop, lambda: None)
    with pytest.raises(CoordinatorConfigError) as info:
        ic.first_start()
    assert str(info.value) == ("sinks: WordCountPipeline commits its output to sinks and none "
                               'is configured (a [sinks] table of NAME = "host:port")')
    loop.close()


def test_a_coordinator_with_no_sinks_and_no_listen_says_so_at_start(
        caplog: pytest.LogCaptureFixture) -> None:
    from ambrosia_services.connectors import ConnectorCoordinator

    loop = asyncio.new_event_loop()
    ic = InMemoryCoordinator(ConnectorCoordinator, "cc", config={})
    ic.engine.attach(loop, lambda: None)
    with caplog.at_level("INFO"):
        ic.first_start()
    said = [r.getMessage() for r in caplog.records]
    assert "no sinks are configured ([sinks]): output is committed nowhere" in said
    assert "no listen key: sources connect to the default 127.0.0.1:7100" in said
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


def test_when_spark_is_behind_the_next_batch_takes_what_waited_up_to_its_bounds(
        coordinator: InMemoryCoordinator) -> None:
    """One job at a time: while batch 1 runs, runs pile up past batch_lines; when it
    ends, batch 2 takes all of them up to max_batch_lines (whole blocks, at least one)."""
    ic = coordinator
    app: WordCountPipeline = ic.instance
    stager: Stager = ic.stager  # type: ignore[attr-defined]
    ic.send("configure_jobs", {**SETTINGS, "staging": str(stager.root), "jobs_in_flight": 1,
                               "max_batch_lines": 8})
    receive(ic, ["a", "b", "c"])
    assert app.cut == 1
    receive(ic, ["d", "e"], ["f", "g", "h"], ["i"], ["j", "k", "l", "m"])
    assert app.cut == 1 and app.pending_lines == 10  # Spark is behind: nothing is cut
    assert app.wants_job_tick(10**20) is False  # nor at a tick, however old
    ic.send("job_batch", "wc-1", 0, 0, rows({"a": 1, "b": 1, "c": 1}), True)
    assert app.cut == 2 and app.pending_lines == 4  # 2 + 3 + 1 lines; 4 more would be 10
    assert stager.lines_of(app.jobs.jobs["wc-2"].args["refs"]) == list("defghi")
    assert app.batches[2][1] == 6
    ic.send("job_batch", "wc-2", 1, 0, rows({c: 1 for c in "defghi"}), True)
    assert app.cut == 3 and app.pending_lines == 0
    assert stager.lines_of(app.jobs.jobs["wc-3"].args["refs"]) == list("jklm")
    ic.send("configure_jobs", {**SETTINGS, "staging": str(stager.root), "jobs_in_flight": 1,
                               "max_batch_lines": 1})
    ic.send("job_batch", "wc-3", 2, 0, rows({c: 1 for c in "jklm"}), True)
    receive(ic, ["n", "o", "p", "q"])  # one block over the bound: taken whole
    assert app.cut == 4 and app.batches[4][1] == 4
    assert bytes(app.core.sinks["out"].pending).count(b"#batch\t") == 3


def test_staged_blocks_are_held_until_every_sink_commits_their_batch(
        coordinator: InMemoryCoordinator) -> None:
    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b"], ["c"], ["d"])
    held = dict(app.core.segments)
    assert sum(held.values()) == 3 and app.core.backlog == 8
    ic.send("job_batch", "wc-1", 0, 0, rows({"a": 1, "b": 1, "c": 1}), True)
    assert app.core.backlog == 8 and app.state_status()["batches"]["uncommitted"] == 1
    ic.send("tick")  # the sink's transaction is cut ...
    txn = app.core.sinks["out"].txn_id
    assert txn
    ic.send("sink_voted", "out", txn, False)  # ... an abort keeps the blocks ...
    assert app.core.backlog == 8
    ic.send("tick")
    ic.send("sink_voted", "out", app.core.sinks["out"].txn_id, True)  # ... a commit lets go
    assert app.core.backlog == 2 and sum(app.core.segments.values()) == 1
    assert app.state_status()["batches"]["uncommitted"] == 0
    assert app.state_status()["staged"] == {"segments": 1, "backlog_bytes": 2}


def test_a_re_sent_run_is_dropped_and_a_straddling_one_is_refused(
        coordinator: InMemoryCoordinator) -> None:
    from ambrosia_services.connectors.coordinator.core import StagedRunError

    ic = coordinator
    app: WordCountPipeline = ic.instance
    stager: Stager = ic.stager  # type: ignore[attr-defined]
    first = stager.run(["a", "b"])
    ic.send("receive_staged", 1, [first])
    ic.send("receive_staged", 2, [first])  # sent again (a feed re-sent it): dropped
    assert app.pending_lines == 2 and app.core.streams[5].dropped == 2
    assert app.core.backlog == 4
    stager.next_id = 2  # a run of messages 2..3, where 2 was applied
    with pytest.raises(StagedRunError, match=r"messages 2\.\.3 straddles its point of "
                                             "reference 2"):
        app.core.receive_staged([stager.run(["b", "c"])])


def test_a_job_lost_again_and_again_fails_instead_of_starting_for_ever(
        coordinator: InMemoryCoordinator) -> None:
    from ambrosia_services.pipeline.jobtable import MAX_LOSSES

    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"])
    for loss in range(MAX_LOSSES):
        entry = app.jobs.jobs["wc-1"]
        assert entry.losses == loss
        ic.send("job_lost", "wc-1", entry.local_id, False, "refused: the frame is too large")
    assert "wc-1" not in app.jobs.jobs
    assert app.jobs.status()["recent"][-1] == [
        "wc-1", "failed", MAX_LOSSES,
        f"lost by its runners {MAX_LOSSES} times (the last: refused: the frame is too large)"]
    assert bytes(app.core.sinks["out"].pending).startswith(b"#failed\t1\t3\n")  # later go on
    again = JobTable.from_state(app.jobs.to_state())
    assert again.to_state() == app.jobs.to_state()


def test_an_attempt_with_no_result_in_time_fails_and_the_next_goes_to_the_next_runner(
        coordinator: InMemoryCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner that hangs (or is stopped, or cannot reach Spark) used to keep its job
    running for good, and, as batches commit in order, every later batch behind it."""
    import types

    from ambrosia_py.testing import inmemory

    clock = [1_800_000_000 * 10**9]  # the inputs' logged time, set by the test
    monkeypatch.setattr(inmemory, "time", types.SimpleNamespace(time_ns=lambda: clock[0]))
    ic = coordinator
    app: WordCountPipeline = ic.instance
    ic.send("configure_jobs", {**SETTINGS, "job_timeout_seconds": 5.0})
    receive(ic, ["a", "b", "c"])
    first = app.jobs.runner_of("wc-1")
    clock[0] += 4 * 10**9
    ic.send("job_tick")
    assert app.jobs.jobs["wc-1"].attempt == 1  # not yet
    clock[0] += 2 * 10**9
    assert app.jobs.timed_out(clock[0]) == ["wc-1"]
    ic.send("job_tick")
    entry = app.jobs.jobs["wc-1"]
    assert entry.attempt == 2 and app.jobs.runner_of("wc-1") != first
    assert entry.failures == [f"no result within 5 s from {first}"]
    assert app.jobs.cancels[-1] == 0  # the hung start is cancelled at its runner
    assert app.jobs.timed_out(clock[0]) == []  # the new attempt's time runs from now
    clock[0] += 6 * 10**9
    ic.send("job_tick")  # the last attempt: the batch fails, later ones are not held
    assert "wc-1" not in app.jobs.jobs
    assert bytes(app.core.sinks["out"].pending) == b"#failed\t1\t3\n"
    again = JobTable.from_state(app.jobs.to_state())
    assert again.to_state() == app.jobs.to_state()


def test_a_job_table_from_an_older_checkpoint_loads_with_no_losses_and_no_time() -> None:
    t = table()
    t.submit("wordcount", {"lines": ["x"]}, 7)
    state = t.to_state()
    state["jobs"][0][1] = state["jobs"][0][1][:9]  # as written before losses and times
    old = JobTable.from_state(state)
    assert (old.jobs["wc-1"].losses, old.jobs["wc-1"].since_ns) == (0, 0)


def test_the_job_links_report_says_which_runner_cannot_use_spark(
        coordinator: InMemoryCoordinator, caplog: pytest.LogCaptureFixture) -> None:
    """A runner whose Spark Connect fails refuses its starts with CONNECT_FAILED; the
    status names it (and the line says so once) until a result comes from it."""
    from ambrosia_services.jobs import Cancel, JobCancelled, JobId
    from ambrosia_services.jobs.attempts import RunnerCancelCode
    from ambrosia_services.pipeline.live import JobsLive

    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"], ["d", "e", "f"])
    cfg = app._pipeline_cfg
    assert cfg is not None
    live = JobsLive(app, cfg)
    runner = app.jobs.runner_of("wc-1")
    member = live.addresses[runner].member
    refused = Cancel(JobId(live.member, 999), member,  # a start the link already ended
                     int(RunnerCancelCode.CONNECT_FAILED),
                     "failed to connect to all addresses; Connection refused")
    with caplog.at_level("INFO"):
        live._cancelled(JobCancelled(refused))
        live._cancelled(JobCancelled(refused))  # said once
    spark = live.report()["spark"]
    assert spark[runner].startswith("failing since ")
    assert spark[runner].endswith(": failed to connect to all addresses; Connection refused")
    other = next(name for name in spark if name != runner)
    assert spark[other] == "no failure seen"
    said = [r.getMessage() for r in caplog.records if "cannot use Spark" in r.getMessage()]
    assert said == [f"runner {runner} cannot use Spark Connect: failed to connect to all "
                    "addresses; Connection refused"]
    live._spark_works(next(k for k in app.jobs.jobs if app.jobs.runner_of(k) == runner))
    assert live.report()["spark"][runner] == "no failure seen"


def test_a_lost_start_is_reconciled_once_by_an_effect_and_retried_as_declared(
        coordinator: InMemoryCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The primary's reconciliations are effects keyed by the lost start: a runner that
    reports the same start lost again does not reconcile it twice, and output that cannot
    be read is read again after the declared back-off rather than ending the primary."""
    from ambrosia_services.jobs import JobId
    from ambrosia_services.jobs.attempts import Reconciled
    from ambrosia_services.jobs.link import Held
    from ambrosia_services.pipeline import live as live_module

    from ambrosia_core.retry import Retry
    from tests.launcher import until

    ic = coordinator
    app: WordCountPipeline = ic.instance
    receive(ic, ["a", "b", "c"], ["d", "e", "f"])
    cfg = app._pipeline_cfg
    assert cfg is not None
    live = live_module.JobsLive(app, cfg)
    key = next(iter(app.jobs.jobs))
    local = app.jobs.jobs[key].local_id
    runner = live.addresses[app.jobs.runner_of(key)].member
    reads: list[Any] = []

    def reconcile(attempt: Any, _out: str) -> Reconciled:
        reads.append(attempt)
        if len(reads) == 1:
            raise OSError("the output's file system is away")
        return Reconciled.COMMITTED

    monkeypatch.setattr(live_module, "reconcile", reconcile)
    monkeypatch.setattr(live_module, "RECONCILE_RETRY",
                        Retry(floor=0.01, cap=0.01, on=(OSError,)))
    lost = Held(runner, (), (JobId(live.member, local),))

    async def main() -> None:
        driver = asyncio.ensure_future(live.chores()["reconciles"].run())
        live._held(lost)
        live._held(lost)  # the same start reported lost again
        await until(lambda: live.counters["reconciled"] == 1, "the reconciliation")
        live._held(lost)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not driver.done()  # the OSError was retried, not the end of the primary
        driver.cancel()
        with pytest.raises(asyncio.CancelledError):
            await driver

    asyncio.run(main())
    assert len(reads) == 2 and live.counters["reconciled"] == 1


def test_the_connector_primarys_tasks_are_effects_and_its_collector_is_retried(
        coordinator: InMemoryCoordinator, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The ticker, reporter, flusher, sinks' links and (with staging) the collector are
    the primary's effects; a collection that fails with an OSError is tried again after
    the declared back-off, said once a streak, instead of ending the primary."""
    from ambrosia_services.connectors.coordinator import live as live_module

    from ambrosia_core.retry import Retry
    from ambrosia_py.effects import chores
    from tests.launcher import until

    live = coordinator.instance._live
    assert live is not None
    named = live.chores()
    assert sorted(named) == ["collector", "flusher", "reporter", "sinks", "ticker"]
    passes: list[int] = []

    async def collect() -> None:
        passes.append(len(passes))
        if len(passes) <= 3:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(live, "collect", collect)
    monkeypatch.setattr(live_module, "COLLECT_RETRY", Retry(floor=0.01, cap=0.01))

    async def main() -> None:
        collector = chores({"collector": live.chores()["collector"]})
        task = asyncio.ensure_future(collector.run())
        await until(lambda: len(passes) >= 4, "a pass after three failures")
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level("WARNING"):
        asyncio.run(main())
    said = [r.getMessage() for r in caplog.records if "not collected" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "staged segments not collected: No space left on device; trying again in")
