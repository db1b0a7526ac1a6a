"""Job links over TLS, with a real runner process on 127.0.0.1: the certificates ``ambrosia
tls init`` makes work end to end; a runner serves only initiators whose certificate its
CA trusts; an expired or strange certificate is named in one line; a TLS record altered
or replayed in flight (through a relay in the test) closes the link with one line; and a
runner asked to listen beyond loopback without TLS refuses unless told ``--insecure``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ambrosia_services.jobs import InitiatorJobs
from ambrosia_services.jobs.attempts import member_id
from ambrosia_services.jobs.link import Disconnected, Held, JobLinks, RunnerAddress
from ambrosia_services.jobs.transport import Hello

from ambrosia_core.processes import kill_process
from ambrosia_core.tls import TlsHandshakeError
from tests.launcher import until, wait_until

from ...pki import Pki, Relay, make_pki

COORDINATOR = uuid.UUID("c7c7c7c7-c7c7-c7c7-c7c7-c7c7c7c7c7c7")
JOBS = "tests.services.jobs.spark.jobs_for_tests"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pki, Pki, Pki]:
    return make_pki(tmp_path_factory.mktemp("pki"))


class Runner:
    """A runner process; ``log()`` is what it said on stderr."""

    def __init__(self, tmp: Path, *args: str, listen: str = "127.0.0.1:0") -> None:
        self.err = tmp / f"runner-{os.getpid()}-{id(self)}.err"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), str(ROOT / "ic-harness"), str(ROOT / "services"),
             os.environ.get("PYTHONPATH", "")]))
        for name in ("AMBROSIA_TLS_CERT", "AMBROSIA_TLS_KEY", "AMBROSIA_TLS_CA"):
            env.pop(name, None)
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ambrosia_services.jobs.runner", "--listen", listen,
                 "--connect", "sc://127.0.0.1:1", "--jobs", JOBS, "--instance-name", "r1",
                 "--dir", str(tmp / "out"), *args],
                stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT)
        assert self.proc.stdout is not None
        # "runner r1 (...) listening on HOST:PORT[ over TLS]; jobs: ..."
        self.line = line = self.proc.stdout.readline()
        found = re.search(r" listening on \S+:(\d+)", line)
        self.port = int(found.group(1)) if found else 0
        self.member = member_id("r1")

    def log(self) -> str:
        return self.err.read_text()

    def close(self) -> None:
        kill_process(self.proc, group=False)


@pytest.fixture
def runner_of(tmp_path: Path) -> Iterator[object]:
    started: list[Runner] = []

    def start(*args: str, listen: str = "127.0.0.1:0") -> Runner:
        r = Runner(tmp_path, *args, listen=listen)
        started.append(r)
        return r

    yield start
    for r in started:
        r.close()


async def _first(links: JobLinks, kinds: tuple[type, ...], limit: float = 20.0) -> object:
    async with asyncio.timeout(limit):
        while True:
            event = await links.next_event()
            if isinstance(event, kinds):
                return event


def _held_over(runner: Runner, tls: Pki | None, port: int | None = None) -> object:
    async def scenario() -> object:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", port or runner.port)],
                         tls=tls.tls() if tls else None, max_backoff=0.05)
        async with links:
            return await _first(links, (Held,))
    return asyncio.run(scenario())


def _unreachable(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot reach runner" in r.getMessage()]


def _wait_for(runner: Runner, text: str) -> str:
    """The first line of the runner's log holding ``text``, once there is one."""
    return str(wait_until(lambda: next((ln for ln in runner.log().splitlines() if text in ln),
                                       None), f"the runner to say {text!r}"))


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_an_initiator_links_to_a_runner(runner_of, pki, secure: bool) -> None:  # type: ignore[no-untyped-def]
    ours = pki[0] if secure else None
    runner = runner_of(*(ours.args() if ours else ()))
    assert _held_over(runner, ours) == Held(runner.member, (), ())


def test_a_runner_refuses_an_initiator_whose_certificate_its_ca_does_not_trust(
        runner_of, pki, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    ours, stranger, _ = pki
    runner = runner_of(*ours.args())

    async def scenario() -> None:
        # The stranger trusts our runner's CA too, so only the runner can refuse.
        tls = stranger.tls()
        tls.client.load_verify_locations(cafile=str(ours.ca))
        with pytest.raises((TlsHandshakeError, ConnectionError, OSError)):
            reader, writer = await tls.connect("127.0.0.1", runner.port)
            writer.write(Hello(uuid.UUID(int=1)).encode())
            await writer.drain()
            assert await reader.read(100) == b""  # never a hello back
            raise ConnectionError("closed")
        # A plain TCP peer is refused as well: it cannot even send its hello.
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.port)
        writer.write(Hello(uuid.UUID(int=1)).encode())
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(100), 10) == b""
        writer.close()

    asyncio.run(scenario())
    line = _wait_for(runner, "refused a connection")
    assert line.endswith("its certificate is not signed by a CA in --tls-ca"), line
    line = _wait_for(runner, "does not speak TLS")
    assert "refused a connection: TLS handshake with 127.0.0.1:" in line
    assert "initiator" not in runner.log()  # no hello was ever read


def test_an_expired_runner_certificate_is_named_in_one_line(
        runner_of, pki, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    ours, _, expired = pki
    runner = runner_of(*expired.args())

    async def scenario() -> None:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)],
                         tls=ours.tls(), max_backoff=0.05)
        async with links:
            await until(lambda: _unreachable(caplog), "the runner's certificate named")
            await asyncio.sleep(1.0)  # a second of failed attempts more, said no more
            assert not links.connected(runner.member)

    with caplog.at_level(logging.INFO, logger="ambrosia_services.jobs.link"):
        asyncio.run(scenario())
    said = _unreachable(caplog)
    assert len(said) == 1, said
    assert (f"(TLS handshake with 127.0.0.1:{runner.port} failed: its certificate has "
            "expired)") in said[0]


def test_a_runner_refuses_an_expired_initiator_certificate(runner_of, pki) -> None:  # type: ignore[no-untyped-def]
    ours, _, expired = pki
    runner = runner_of(*ours.args())

    async def scenario() -> None:
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", runner.port)],
                         tls=expired.tls(), max_backoff=0.05)
        async with links:
            await until(lambda: "refused a connection" in runner.log(), "the runner's refusal")
            await asyncio.sleep(1.0)  # a second of attempts more, none linked
            assert not links.connected(runner.member)

    asyncio.run(scenario())
    line = _wait_for(runner, "refused a connection")
    assert line.endswith("failed: its certificate has expired"), line


@pytest.mark.parametrize("mode", ["flip", "replay"])
def test_a_record_altered_or_replayed_in_flight_closes_the_link_in_one_line(
        runner_of, pki, mode: str) -> None:  # type: ignore[no-untyped-def]
    ours = pki[0]
    runner = runner_of(*ours.args())

    async def scenario() -> object:
        relay = Relay(runner.port)
        port = await relay.start()
        links = JobLinks(InitiatorJobs(COORDINATOR),
                         [RunnerAddress(runner.member, "127.0.0.1", port)], tls=ours.tls(),
                         max_backoff=5.0)
        async with links:
            assert isinstance(await _first(links, (Held,)), Held)
            relay.arm(mode)
            links.start("sleepy", {}, [runner.member])  # a record to alter
            await asyncio.wait_for(relay.done.wait(), 10)
            return await _first(links, (Disconnected,))

    gone = asyncio.run(scenario())
    assert isinstance(gone, Disconnected)
    line = _wait_for(runner, "closing connection from initiator")
    assert line.endswith("a record failed its integrity check (altered, replayed or cut in "
                         "transit)"), line
    assert "starting" not in runner.log() and "launch" not in runner.log()


def test_listening_beyond_loopback_needs_tls_or_insecure(runner_of, pki) -> None:  # type: ignore[no-untyped-def]
    refused = runner_of(listen="0.0.0.0:0")
    assert refused.proc.wait(30) == 1
    assert refused.log().strip().splitlines() == [
        "python -m ambrosia_services.jobs.runner: error: the runner would listen on 0.0.0.0, "
        "beyond loopback, without TLS: give "
        "--tls-cert, --tls-key and --tls-ca (`ambrosia tls init` makes them), or --insecure "
        "to accept anyone who reaches the port"]
    insecure = runner_of("--insecure", listen="0.0.0.0:0")
    assert insecure.port and insecure.proc.poll() is None
    assert "the runner listens on 0.0.0.0 without TLS (--insecure)" in insecure.log()
    assert " over TLS" not in insecure.line
    secure = runner_of(*pki[0].args(), listen="0.0.0.0:0")
    assert secure.port and secure.proc.poll() is None
    assert f"listening on 0.0.0.0:{secure.port} over TLS; jobs: " in secure.line
    assert _held_over(secure, pki[0]) == Held(secure.member, (), ())
    # 127.0.0.2 is loopback too: no TLS needed there.
    local = runner_of(listen="127.0.0.2:0")
    assert local.port and local.proc.poll() is None


def test_tls_options_go_together(runner_of, pki) -> None:  # type: ignore[no-untyped-def]
    cert, _ = pki[0].cert()
    r = runner_of("--tls-cert", str(cert))
    assert r.proc.wait(30) == 1
    assert r.log().strip() == (
        "python -m ambrosia_services.jobs.runner: error: TLS needs a certificate, its key "
        "and a CA file together (--tls-cert, --tls-key, --tls-ca; in a [tls] table cert, "
        "key, ca); missing --tls-key, --tls-ca")
