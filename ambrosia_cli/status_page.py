"""``ambrosia status -i NAME --listen [HOST:]PORT``: the status page, served from this process.

The instance already writes everything the page shows to its status file; the server
only reads that file (``load_status``, as the text command does), adds what the registry
knows (the replicas, and which of them holds the log lock), and hands it to the page as
``/status.json``, which the page asks for every second. Nothing here talks to the
instance, so the page works as well for a stopped instance, from its last status file.

The status file's ``history`` starts afresh with each life of the instance; the server
keeps its own copy, extended with every newer sample it reads, so a page left open
across a restart still charts what came before it. For an instance whose file has no
history, the server samples the file's counters itself each time the file changes.

The server is the standard library's ``ThreadingHTTPServer``: a page polled by a few
browsers needs no framework. It answers GET of the page's files and of
``/status.json`` only, listens on 127.0.0.1 unless told otherwise, and on loopback takes
only requests addressed to a loopback name (a web page elsewhere cannot make a browser
read it through a name that resolves to 127.0.0.1).
"""

from __future__ import annotations

import ipaddress
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ambrosia_ic import registry
from ambrosia_ic.registry.hosts import format_address

from ambrosia_core.addresses import Address
from ambrosia_core.errors import AmbrosiaError

from .instances import describe
from .status_file import StatusError, life_state, load_status

__all__ = ["PAGE_FILES", "PageServer", "StatusSource", "merge_history", "page_files",
           "replica_rows", "sample_of", "serve"]

#: The page's files (in ``ambrosia_cli/page``) by the paths they are served at.
PAGE_FILES: Mapping[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
}
STATUS_PATH = "/status.json"

#: Samples the server keeps (and sends each second): at an instance's default of one per
#: 5 s, the last 80 minutes.
HISTORY_KEEP = 1000
#: How often the server reads the status file while nobody asks, to extend its history.
SAMPLE_SECONDS = 1.0

# Everything the page loads comes from this server; it makes no other request.
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'",
}
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def merge_history(kept: Sequence[Mapping[str, Any]], incoming: Sequence[Any],
                  keep: int = HISTORY_KEEP) -> list[Mapping[str, Any]]:
    """``kept`` followed by the samples of ``incoming`` newer than its newest, the last
    ``keep`` of them. A sample is a mapping with a numeric ``time`` (seconds); anything
    else in ``incoming`` (a damaged file) is left out, as are samples out of order."""
    merged = list(kept)
    last = merged[-1]["time"] if merged else float("-inf")
    for sample in incoming:
        if isinstance(sample, Mapping) and _number(sample.get("time")) and \
                sample["time"] > last:
            merged.append(sample)
            last = sample["time"]
    return merged[-keep:]


def sample_of(report: Mapping[str, Any], at: float) -> dict[str, Any]:
    """A history sample of ``report``'s counters taken at ``at`` (the file's time), for
    a status file that keeps no history: the fields an instance's own samples have,
    without commit latency, which only the instance measures."""
    streams = [s for s in (report.get("streams") or {}).values() if isinstance(s, Mapping)]
    sinks = report.get("sinks") or {}

    def total(key: str) -> int:
        return sum(s[key] for s in streams if _number(s.get(key)))

    return {"time": round(at, 3), "received": report.get("received"),
            "acked": report.get("acked"), "applied": total("applied"),
            "lines": total("lines"),
            "committed": {name: s.get("committed") for name, s in sinks.items()
                          if isinstance(s, Mapping)},
            "commits": None, "latency_ms": None, "latency_max_ms": None}


def _replica_of(pid: int) -> int:
    """The replica number a coordinator process was started as (``--replica N``; 0 when
    it was given none)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return 0
    for i, arg in enumerate(args):
        for option in ("--replica", "--replicaNum", "-r"):
            value = (args[i + 1] if arg == option and i + 1 < len(args) else
                     arg.removeprefix(option + "=") if arg.startswith(option + "=") else None)
            if value is not None and value.isdigit():
                return int(value)
    return 0


def replica_rows(name: str, home: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What ``ambrosia list`` says of ``name`` (role, version, running, the lock's holder),
    and a row per registered replica: its number, where it takes links, its ports, and
    whether it is the one holding the log lock (the primary).

    Raises:
        AmbrosiaError: the instance is not registered, or its registry files are damaged.
    """
    instance = describe(name, home)
    reg = registry.load(name, home)
    holder = instance["pid"]
    primary = _replica_of(holder) if holder is not None else None
    rows = [{"replica": r.number, "links_at": format_address(r.advertise_host, r.ic_port),
             "receive_port": r.receive_port, "send_port": r.send_port, "ic_port": r.ic_port,
             "log_lock": f"held (pid {holder})" if r.number == primary else "-"}
            for r in registry.replicas(reg, home)]
    return instance, rows


class StatusSource:
    """The status file of one instance as the page sees it, and the history the server
    keeps of it. Safe to call from the server's threads at once (one lock)."""

    def __init__(self, name: str, home: Path, path: Path | None = None,
                 keep: int = HISTORY_KEEP) -> None:
        self.name = name
        self.home = home
        self.path = path
        self.keep = keep
        self.history: list[Mapping[str, Any]] = []
        self._lock = threading.Lock()

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """The document served as ``/status.json``: the latest report (less its history
        and errors, which have keys of their own), its age, whether the instance runs,
        the replicas, the merged history and the recent errors. What cannot be read is
        said in ``error`` (one line) and the rest is served as far as it is known."""
        now = time.time() if now is None else now
        doc: dict[str, Any] = {"name": self.name, "time": round(now, 3), "error": None,
                               "report": None, "age_seconds": None, "running": None,
                               "state": None,
                               "errors": [], "instance": None, "replicas": [],
                               "replicas_error": None}
        try:
            doc["instance"], doc["replicas"] = replica_rows(self.name, self.home)
            doc["running"] = doc["instance"]["running"]
        except AmbrosiaError as err:
            doc["replicas_error"] = str(err)
        with self._lock:
            try:
                report, age, running = load_status(self.name, self.home, self.path, now)
            except StatusError as err:
                doc["error"] = str(err)
            else:
                incoming = report.pop("history", None)
                if not isinstance(incoming, list):
                    incoming = [sample_of(report, now - age)]
                self.history = merge_history(self.history, incoming, self.keep)
                errors = report.pop("errors", None)
                doc.update(report=report, age_seconds=round(age, 3), running=running,
                           state=life_state(report, running),
                           errors=errors if isinstance(errors, list) else [])
            doc["history"] = self.history
        return doc


class _Handler(BaseHTTPRequestHandler):
    """GET of the page's files and of ``/status.json``; 404 for another path, 405 for
    another method."""

    server: PageServer
    server_version = "ambrosia-status"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # the page's requests reuse one connection

    def do_GET(self) -> None:
        if not self.server.host_allowed(self.headers.get("Host", "")):
            self._reply(HTTPStatus.MISDIRECTED_REQUEST, "text/plain; charset=utf-8",
                        b"this server answers requests for a loopback name only\n")
            return
        path = urlsplit(self.path).path
        if path == STATUS_PATH:
            body = json.dumps(self.server.source.snapshot()).encode()
            self._reply(HTTPStatus.OK, "application/json", body)
        elif path in PAGE_FILES:
            file, kind = PAGE_FILES[path]
            self._reply(HTTPStatus.OK, kind, self.server.files[file])
        else:
            self._reply(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8",
                        f"no {path} here: the page is at /\n".encode())

    def _not_allowed(self) -> None:
        self._reply(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain; charset=utf-8",
                    b"only GET is served here\n", {"Allow": "GET"})

    def __getattr__(self, name: str) -> Any:
        # http.server looks up do_<METHOD>; every method but GET gets 405 (not 501).
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _reply(self, status: HTTPStatus, kind: str, body: bytes,
               extra: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {**_HEADERS, "Content-Type": kind,
                           "Content-Length": str(len(body)), **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the page asks every second; a line per request would drown the URL."""


class PageServer(ThreadingHTTPServer):
    """The status page's HTTP server for one instance (``source``)."""

    daemon_threads = True

    def __init__(self, address: Address, source: StatusSource,
                 files: Mapping[str, bytes]) -> None:
        if ":" in address.host:
            self.address_family = socket.AF_INET6
        self.source = source
        self.files = files
        self.loopback = _is_loopback(address.host)
        super().__init__((address.host, address.port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{format_address(str(host), int(port))}/"

    def host_allowed(self, header: str) -> bool:
        """Whether a request's Host header may be answered: any, when the server listens
        beyond loopback; else only a loopback address or ``localhost`` (or none: no
        browser sends a request without one)."""
        if not self.loopback or not header:
            return True
        host = header.rsplit(":", 1)[0] if not header.endswith("]") else header
        host = host.strip("[]").lower()
        return host in _LOOPBACK_NAMES or _is_loopback(host)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that goes away mid-reply is ordinary; anything else is one line on
        stderr, and the server goes on."""
        err = sys.exc_info()[1]
        if isinstance(err, ConnectionError):
            return
        print(f"ambrosia status: a request from {client_address[0]} failed: "
              f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() in _LOOPBACK_NAMES


def page_files() -> dict[str, bytes]:
    """The page's files, read once from the package (they are package data).

    Raises:
        StatusError: one is missing (a broken install).
    """
    try:
        return {name: resources.files("ambrosia_cli").joinpath("page", name).read_bytes()
                for name, _kind in PAGE_FILES.values()}
    except OSError as err:
        raise StatusError(f"the status page's files are missing from this install: "
                          f"{err.strerror or err}: {err.filename}") from None


def serve(name: str, home: Path, path: Path | None, address: Address) -> int:
    """Serve ``name``'s status page at ``address`` until SIGINT or SIGTERM; returns 0.

    Raises:
        StatusError: the instance is not registered, or the address cannot be listened on.
    """
    try:
        registry.load(name, home)
    except AmbrosiaError as err:
        raise StatusError(str(err)) from None
    source = StatusSource(name, home, path)
    files = page_files()
    try:
        server = PageServer(address, source, files)
    except OSError as err:
        raise StatusError(f"cannot listen on {address}: {err.strerror or err}") from None
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_SECONDS):
            source.snapshot()

    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                name="status-page", daemon=True),
               threading.Thread(target=sample, name="status-sampler", daemon=True)]
    try:
        source.snapshot()
        for t in threads:
            t.start()
        print(f"ambrosia status: the status page of {name} is at {server.url} "
              "(Ctrl-C stops it)", flush=True)
        if not server.loopback:
            print(f"ambrosia status: note: the page has no authentication; whoever reaches "
                  f"{address.host} can read {name}'s status", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        stop.set()
        if threads[0].ident is not None:  # shutdown() waits for a loop that ran
            server.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
