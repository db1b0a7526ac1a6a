"""``ambrosia run`` shows a replay's progress against an estimate of the records to come,
made from the log files before the coordinator starts. Checked against a recorded log."""

from __future__ import annotations

from ambrosia_ic.logstore import scan_log
from ambrosia_ic.recovery import estimate_replay, plan_recovery

from ambrosia_py.runtime.progress import progress_line
from tests.launcher import wait_until

from .conftest import Harness
from .test_first_start import _run_chain


def test_the_estimate_counts_the_records_a_recovery_replays(harness: Harness) -> None:
    reg = harness.register("alpha")
    assert estimate_replay(harness.instance_dir("alpha")) is None  # nothing yet
    proc = harness.start("alpha")
    d = harness.drive("alpha")
    wait_until(d.primary.is_set, "primary")
    _run_chain(d, 0, 12)
    harness.kill9(proc)
    d.thread.join(30)

    idir = harness.instance_dir("alpha")
    plan = plan_recovery(idir, reg.committer_id)
    assert plan is not None and plan.records > 12
    exact = estimate_replay(idir)
    assert exact is not None and exact.exact and exact.records == plan.records
    # The bytes of records, not the files' sizes: the live log ends in zeros written ahead.
    assert exact.log_bytes == sum(scan_log(p)[1].good_end for p in idir.glob("serverlog*"))
    assert exact.log_bytes < sum(p.stat().st_size for p in idir.glob("serverlog*"))
    rough = estimate_replay(idir, sample=3)
    assert rough is not None and not rough.exact
    assert plan.records / 2 <= rough.records <= plan.records * 2


def test_the_progress_line_has_a_share_and_time_left_only_with_a_total() -> None:
    assert progress_line(1500, None, 2.0) == "replaying the log: 1,500 records, 750 records/s"
    assert progress_line(50, 200, 0.5) == (
        "replaying the log: 50 of about 200 records (25%), 100 records/s, about 2 s left")
    # An estimate may fall short: never past 100%, never a negative time left.
    assert progress_line(300, 200, 1.0) == (
        "replaying the log: 300 of about 200 records (100%), 300 records/s, about 0 s left")
