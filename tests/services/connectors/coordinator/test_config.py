"""The coordinator's configuration: defaults, one-line errors naming the key."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ambrosia_services.connectors import CoordinatorConfig
from ambrosia_services.connectors.coordinator import CoordinatorConfigError

from ambrosia_core.addresses import Address
from ambrosia_core.ports import free_ports
from tests.launcher import ROOT


def test_defaults_and_the_decision_part() -> None:
    cfg = CoordinatorConfig.from_mapping({"sinks": {"b": "127.0.0.1:2", "a": "h:1"}})
    assert cfg.listen_address == Address("127.0.0.1", 7100)
    assert (cfg.credits, cfg.interval_bytes, cfg.batch_messages) == (1000, 65536, 512)
    assert cfg.decision_part() == {"sinks": ["a", "b"], "interval_bytes": 65536,
                                   "interval_seconds": 0.5}


def test_an_ipv6_listen_address_goes_in_brackets() -> None:
    cfg = CoordinatorConfig.from_mapping({"listen": "[::1]:0"})
    assert cfg.listen_address == Address("::1", 0)


@pytest.mark.parametrize(("config", "message"), [
    ({"lisen": "x"}, "unknown configuration key(s) lisen"),
    ({"listen": "nohost"}, 'listen must be "host:port"'),
    ({"listen": "h:70000"}, 'listen must be "host:port"'),
    ({"listen": "::1:7100"}, "an IPv6 host goes in brackets"),
    ({"max_sources": 0}, "max_sources must be an integer >= 1"),
    ({"max_sources": "5"}, "max_sources must be an integer >= 1"),
    # Tuning that was a key once: named, with the value it is fixed at, not ignored.
    ({"credits": 5}, "credits is no longer a configuration key: a source's credits are "
                     "fixed at 1000; remove it"),
    ({"batch_messages": 64, "listen": "h:1"}, "batch_messages is no longer a configuration"),
    ({"handshake_seconds": 1}, "handshake_seconds is no longer a configuration key"),
    ({"segment_bytes": 8192}, "segment_bytes is no longer a configuration key"),
    ({"interval_seconds": 0}, "interval_seconds must be a number of seconds > 0"),
    ({"sinks": {"out": 5}}, 'sinks.out must be a "host:port" string'),
    ({"sinks": "out"}, "sinks must be a table"),
    ({"cookie": 1}, "cookie must be a string"),
])
def test_bad_values_are_one_line_naming_the_key(config: dict[str, object],
                                                message: str) -> None:
    with pytest.raises(CoordinatorConfigError) as info:
        CoordinatorConfig.from_mapping(config)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.integration
def test_a_listen_port_in_use_stops_the_instance_in_one_line(tmp_path: Path) -> None:
    """Another program holds the port: the instance must not run on without a listener
    (it did, after an unretrieved task's traceback); it stops, naming the address."""
    (port,) = free_ports(1)
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    cfg = tmp_path / "coord.toml"
    cfg.write_text(f'listen = "127.0.0.1:{port}"\n')
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ambrosia_cli", "--home", str(tmp_path / "home"), "run",
             "ambrosia_services.connectors:ConnectorCoordinator", "-i", "cc", "--config", str(cfg)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith("ambrosia run: error: a side effect of cc failed: listen: cannot "
                           f"listen for sources on 127.0.0.1:{port}: "), last
    assert "in use" in last
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr
    assert "the binding closed its connection" not in done.stderr
