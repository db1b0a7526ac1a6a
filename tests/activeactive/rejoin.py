"""A fenced primary rejoins as a standby by itself, with real processes: replicas of the
failover benchmark's ``Counter`` (``ambrosia ic --replica N`` + ``ambrosia run`` each) and
a caller awaiting one request after another. The primary's coordinator is paused past
its lease, a standby takes over, and the old one resumes: nobody restarts anything, and
once the new primary is killed the old one takes over again. Every request applied
exactly once (the caller checks each reply, ``failover_apps``)."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import failover_procs  # noqa: E402
from ambrosia_ic import registry  # noqa: E402
from ambrosia_ic.lease import current_epoch  # noqa: E402

from tests.launcher import wait_until  # noqa: E402

sys.path.remove(str(BENCH))



def pause_resume_and_kill(tmp: Path, log_store: str, replicas: int) -> None:
    rs = failover_procs.ReplicaSet(tmp, log_store, replicas=replicas)
    try:
        rs.start()
        old = rs.primary()
        assert old is not None
        ic, binding = rs.ics[old], rs.bindings[old]
        ic.send_signal(signal.SIGSTOP)
        try:
            new = wait_until(lambda: (p := rs.primary()) is not None and p != old and p + 1,
                             "a standby taking over") - 1
            seen = len(rs.reply_times())
            wait_until(lambda: len(rs.reply_times()) > seen + 20, "the new primary replying")
        finally:
            ic.send_signal(signal.SIGCONT)
        lines = rs.ic_lines[old]
        wait_until(lambda: lines.count("rejoining as a standby"), "the old primary rejoining")
        epoch = current_epoch(registry.instance_dir(registry.load(failover_procs.SERVER,
                                                                  rs.home)))
        fenced = lines.nth("rejoining as a standby", 1)
        assert fenced is not None and lines.count("rejoining as a standby") == 1
        # The epoch that fenced it is the takeover's or, with a Raft log, a renewal's after
        # it (a new primary silent past half its lease, as on a busy machine, claims the
        # next epoch itself): newer than the old primary's first, and no newer than now.
        by = re.search(r"fenced by epoch (\d+), rejoining as a standby", fenced[1])
        assert by is not None and 2 <= int(by[1]) <= epoch, (fenced[1], epoch)
        wait_until(lambda: rs.binding_lines[old].count("starts afresh"),
                   "its binding starting afresh")
        # Both processes are those started at first: nobody restarted them.
        assert ic.poll() is None and binding.poll() is None
        wait_until(lambda: lines.count("following") >= 1, "the old primary following")
        seen = len(rs.reply_times())
        wait_until(lambda: len(rs.reply_times()) > seen + 20, "replies after the rejoin")
        became = rs.binding_lines[old].count("became primary")
        # Only the old primary can take over now: it must have caught up.
        for p in (rs.ics[new], rs.bindings[new]):
            p.send_signal(signal.SIGKILL)
            p.wait()
        wait_until(lambda: rs.primary() == old, "the old primary taking over again")
        wait_until(lambda: rs.binding_lines[old].count("became primary") > became,
                   "its binding becoming primary")
        seen = len(rs.reply_times())
        wait_until(lambda: len(rs.reply_times()) > seen + 20, "replies from the old primary")
        assert rs.finish() > 60
    except BaseException:
        for n in rs.ics:
            print(f"--- replica {n} coordinator\n{rs.ic_lines[n].tail(30)}\n--- binding\n"
                  f"{rs.binding_lines[n].tail()}", file=sys.stderr)
        print(f"--- caller\n{rs.client_lines.tail()}", file=sys.stderr)
        raise
    finally:
        rs.stop()
