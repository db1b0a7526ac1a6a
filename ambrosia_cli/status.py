"""``ambrosia status -i NAME``: a running instance's status file as tables.

An instance that reports its status (the connector coordinator and the pipeline built on
it: their ``status_file`` key) rewrites a JSON file every few seconds. ``ambrosia run``
records where, under the registry home, so this command finds it by the instance's name
alone; an instance whose configuration names no file may write ``status.json`` in its
instance directory, the place looked at next (``ambrosia_cli.status_file``, which the page
reads through too). Every status says how old it is; one left by
an instance that no longer runs (no coordinator holds its log lock) is its last status,
and says how the instance ended (``life_state``): *stopped* when its process wrote that
status as it stopped (marked ``stopped``, with the reason), *crashed* when the process
(``pid``) is gone without writing it (kill -9, a crash, a power cut).

The live counters (received, acked, connections, lag) are of the process's run since it
became primary (``run_started``): a restart counts them from zero, while the tables'
counters (a stream's applied lines, a sink's committed bytes) come from the state and
cover every run; the summary line says "this run" and since when.

``--listen [HOST:]PORT`` serves the same status as a page that refreshes itself, with a
chart of the file's history (``ambrosia_cli.status_page``).
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ambrosia_ic import registry

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AddressError

from .status_file import life_state, load_status

__all__ = ["add_status", "render", "status_main"]

#: Where ``--listen`` listens when given a port alone.
SERVE_HOST = "127.0.0.1"
#: The recent errors ``status`` prints (the page shows all the file keeps).
ERRORS_SHOWN = 5


# ------------------------------------------------------------------ rendering


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


# Columns in the order a reader follows the data (status files sort their keys); any
# other key follows them.
_ORDER = ("stream", "sink", "job", "runner", "name", "state", "phase", "linked",
          "applied", "dropped", "por", "closed", "decided", "waiting", "running", "done",
          "failed", "attempts", "attempt", "committed", "pending_bytes", "txn", "commits", "aborts",
          "active")


def table(title: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``rows`` (dicts) as aligned columns under ``title``: the keys of every row, known
    ones in a fixed order and the rest as first seen."""
    if not rows:
        return [f"{title}: none"]
    columns = [k for k in _ORDER if any(k in row for row in rows)]
    for row in rows:
        columns += [k for k in row if k not in columns]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    # Text left, numbers right: the way a reader compares counters.
    right = [all(r[i].lstrip("-").isdigit() or r[i] == "-" for r in cells)
             and any(r[i] != "-" for r in cells) for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w)
                         for v, w, r in zip(values, widths, right, strict=True)).rstrip()

    return [f"{title}:", "  " + line(columns), *("  " + line(r) for r in cells)]


def _keyed(items: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """``{name: {field: value}}`` as rows whose first column is ``key``."""
    rows = []
    for name, fields in items.items():
        row: dict[str, Any] = {key: name}
        row.update(fields if isinstance(fields, Mapping) else {"value": fields})
        rows.append(row)
    return rows


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _head(name: str, report: Mapping[str, Any], age: float, running: bool) -> str:
    state = life_state(report, running)
    last = f"its last status, of {_age(age)} ago"
    if state == "running":
        return f"{name}: status of {_age(age)} ago"
    if state == "crashed":
        return (f"{name}: crashed: its process ({report['pid']}) ended without writing its "
                f"last status (kill -9, a crash, a power cut); {last}")
    if state == "stopping":
        return (f"{name}: stopping: no coordinator holds its lock, its process "
                f"({report['pid']}) has not ended yet; {last}")
    stopped = report.get("stopped")
    reason = stopped.get("reason") if isinstance(stopped, Mapping) else None
    why = f" ({reason})" if isinstance(reason, str) and reason != "stopped" else ""
    return f"{name}: stopped{why}; {last}"


def _since(at: float) -> str:
    """When this run began: the time of day, with the date when not today."""
    when = datetime.datetime.fromtimestamp(at)
    if when.date() == datetime.date.today():
        return when.strftime("%H:%M:%S")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def render(name: str, report: Mapping[str, Any], age: float, running: bool = True) -> str:
    """A status report as text: a summary line (how old the status is, whether the
    instance still runs or how it ended, and the live counters of its run), then
    streams, jobs and sinks."""
    summary = [_head(name, report, age, running)]
    if "port" in report:
        summary.append(f"sources on port {report['port']}")
    live = [f"{key} {_cell(report[key])}"
            for key in ("connections", "received", "acked", "lag") if key in report]
    started = report.get("run_started")
    if live and isinstance(started, (int, float)) and not isinstance(started, bool):
        head = ", ".join(summary)
        lines = [f"{head}; this run (since {_since(started)}): {', '.join(live)}"]
    else:
        lines = [", ".join(summary + live)]
    streams = report.get("streams") or {}
    lines += table("streams", _keyed(streams, "stream"))
    jobs = report.get("jobs")
    if isinstance(jobs, Mapping) and jobs:
        lines += _jobs(jobs)
    elif "jobs" in report:
        lines += ["jobs: none"]
    # Any other section (the word count's "batches", the job links, ...): its counters
    # as one row, each table in it as rows of name and value.
    for key, value in report.items():
        if (key in ("streams", "sinks", "jobs", "linked", "stopped")  # stopped: the head
                or not isinstance(value, Mapping)):
            continue
        counters = {k: v for k, v in value.items() if not isinstance(v, (Mapping, list))}
        if counters:
            lines += table(key.replace("_", " "), [counters])
        for sub, items in value.items():
            if isinstance(items, Mapping) and items:
                name, what = _NAMED.get(sub, ("name", "value"))
                lines += table(f"{key.replace('_', ' ')}: {sub}",
                               [{name: k, what: v} for k, v in items.items()])
    sinks = _keyed(report.get("sinks") or {}, "sink")
    linked = report.get("linked") or {}
    for row in sinks:
        if row["sink"] in linked:
            row["linked"] = linked[row["sink"]]
    lines += table("sinks", sinks)
    lines += _errors(report.get("errors"))
    return "\n".join(lines)


def _errors(errors: Any) -> list[str]:
    """The last few warnings and errors the instance logged, one line each (none: no
    lines; the status page shows them all)."""
    if not isinstance(errors, list) or not errors:
        return []
    shown = [e for e in errors if isinstance(e, Mapping)][-ERRORS_SHOWN:]
    lines = [f"recent errors ({len(shown)} of {len(errors)}, newest last):"]
    for e in shown:
        at = e.get("time")
        clock = (datetime.datetime.fromtimestamp(at).strftime("%H:%M:%S")
                 if isinstance(at, (int, float)) else "-")
        lines.append(f"  {clock} {e.get('level', '-')} {e.get('logger', '-')}: "
                     f"{e.get('message', '')}")
    return lines


# Column names of the tables inside a section: {sub-table: (key column, value column)}.
_NAMED = {"runners": ("runner", "linked")}


def _jobs(jobs: Mapping[str, Any]) -> list[str]:
    """Job counters as one row; per-job entries (``{key: {...}}``) and the recent jobs
    (``[[key, phase, attempts, reason], ...]``) as rows of their own."""
    if all(isinstance(v, Mapping) for v in jobs.values()):
        return table("jobs", _keyed(jobs, "job"))
    counters = {k: v for k, v in jobs.items() if not isinstance(v, (Mapping, list))}
    lines = table("jobs", [counters]) if counters else []
    recent = jobs.get("recent")
    if isinstance(recent, list) and recent:
        rows = [dict(zip(("job", "phase", "attempts", "reason"), entry, strict=False))
                for entry in recent if isinstance(entry, list)]
        lines += table("recent jobs", rows)
    return lines


# ------------------------------------------------------------------ the command


def add_status(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("status", help="show an instance's streams, jobs and sinks, from its "
                                      "status file (a stopped instance's last one)")
    p.add_argument("-i", "--instance-name", "--instanceName", required=True,
                   help="the registered instance")
    p.add_argument("--file", default=None, metavar="PATH",
                   help="read this status file (default: the one `ambrosia run` recorded "
                        "from the configuration's status_file, else status.json in the "
                        "instance directory)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--listen", type=serve_address, default=None, metavar="[HOST:]PORT",
                   help=f"listen on HOST ({SERVE_HOST} by default; port 0: any free port) "
                        "and serve a page of the status that refreshes itself (streams, "
                        "jobs, sinks, replicas, a chart of throughput and commit latency, "
                        "recent errors) until Ctrl-C")
    p.set_defaults(handler=status_main)
    return p


def serve_address(text: str) -> Address:
    """``--listen``'s value: ``PORT``, ``:PORT`` or ``HOST:PORT`` (port 0: a free one), as an
    argparse type whose error is one line."""
    try:
        if text.strip().isdigit():
            text = f":{text.strip()}"
        return Address.parse(text, what="", allow_port_zero=True, default_host=SERVE_HOST)
    except AddressError as err:
        raise argparse.ArgumentTypeError(str(err) if err.detail else
                                         f"{text!r} is not [HOST:]PORT") from None


def status_main(args: argparse.Namespace) -> int:
    home = registry.ambrosia_home(args.home)
    if args.listen is not None:
        # Imported here: the page's server is no part of the text command.
        from .status_page import serve
        return serve(args.instance_name, home, Path(args.file) if args.file else None,
                     args.listen)
    report, age, running = load_status(args.instance_name, home,
                                       Path(args.file) if args.file else None)
    if args.json:
        print(json.dumps({**report, "age_seconds": round(age, 3), "running": running,
                          "state": life_state(report, running)}, indent=1, sort_keys=True))
    else:
        print(render(args.instance_name, report, age, running))
        # Where other coordinators reach it, when that is not 127.0.0.1.
        for line in registry.link_lines(registry.load(args.instance_name, home), home):
            print(line)
    return 0
