"""``HOST:PORT`` addresses: text that round-trips, IPv6 in brackets, and each kind of bad
input refused in one line that names the option and the text."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ambrosia_core.addresses import MAX_PORT, Address, address_argument
from ambrosia_core.errors import AddressError, UsageError
from tests.strategies import addresses, hosts, ipv6_hosts


@given(addresses)
def test_text_parses_back_to_the_same_address(address: Address) -> None:
    assert Address.parse(str(address), allow_port_zero=True) == address


@given(hosts, st.integers(1, MAX_PORT))
def test_every_port_from_one_is_taken_without_asking(host: str, port: int) -> None:
    assert Address.parse(str(Address(host, port))) == Address(host, port)


@given(ipv6_hosts, st.integers(0, MAX_PORT))
def test_an_ipv6_host_is_written_in_brackets(host: str, port: int) -> None:
    assert str(Address(host, port)) == f"[{host}]:{port}"


@pytest.mark.parametrize(("text", "address"), [
    ("127.0.0.1:7000", Address("127.0.0.1", 7000)),
    ("node-a.example:1", Address("node-a.example", 1)),
    ("[::1]:65535", Address("::1", 65535)),
    ("[fe80::1%eth0]:7000", Address("fe80::1%eth0", 7000)),
    ("  localhost:7000\n", Address("localhost", 7000)),
    ("localhost:007", Address("localhost", 7)),
])
def test_the_forms_taken(text: str, address: Address) -> None:
    assert Address.parse(text) == address


def test_port_zero_and_a_default_host_only_where_the_caller_asks() -> None:
    assert Address.parse("h:0", allow_port_zero=True) == Address("h", 0)
    assert Address.parse(":7000", default_host="127.0.0.1") == Address("127.0.0.1", 7000)
    with pytest.raises(AddressError, match="port must be from 1 to 65535"):
        Address.parse("h:0")
    with pytest.raises(AddressError, match="no host"):
        Address.parse(":7000")
    with pytest.raises(AddressError, match=r"^address '7000' is not HOST:PORT$"):
        Address.parse("7000", default_host="127.0.0.1")


@pytest.mark.parametrize(("text", "message"), [
    ("", "--to '' is not HOST:PORT"),
    ("localhost", "--to 'localhost' is not HOST:PORT"),
    ("localhost:", "--to 'localhost:' is not HOST:PORT (no port)"),
    ("[::1]", "--to '[::1]' is not HOST:PORT (no port)"),
    (":7000", "--to ':7000' is not HOST:PORT (no host)"),
    ("[]:7000", "--to '[]:7000' is not HOST:PORT (no host)"),
    ("h:x", "--to 'h:x' is not HOST:PORT (the port is not a number)"),
    ("h:-1", "--to 'h:-1' is not HOST:PORT (the port is not a number)"),
    ("h:\u0663", "--to 'h:\u0663' is not HOST:PORT (the port is not a number)"),
    ("h:65536", "--to 'h:65536' is not HOST:PORT (the port must be from 1 to 65535)"),
    ("::1:7000", "--to '::1:7000' is not HOST:PORT (an IPv6 host goes in brackets, as in "
                 "[::1]:7000)"),
    ("[::1:7000", "--to '[::1:7000' is not HOST:PORT (no ']' closes the IPv6 host)"),
    ("[::1]7000", "--to '[::1]7000' is not HOST:PORT (the port must follow ']' after a ':')"),
    ("[node-a]:7000", "--to '[node-a]:7000' is not HOST:PORT (only an IPv6 address goes in "
                      "brackets)"),
    ("h]:7000", "--to 'h]:7000' is not HOST:PORT (only an IPv6 address goes in brackets, "
                "before the ':')"),
    ("a b:7000", "--to 'a b:7000' is not HOST:PORT (a host has no blanks in it)"),
])
def test_each_bad_input_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(AddressError) as info:
        Address.parse(text, what="--to")
    assert str(info.value) == message
    assert isinstance(info.value, UsageError) and isinstance(info.value, ValueError)


def test_the_constructor_refuses_what_no_text_could_say() -> None:
    with pytest.raises(AddressError, match="needs a host"):
        Address("", 7000)
    with pytest.raises(AddressError, match="from 0 to 65535"):
        Address("h", 65536)
    with pytest.raises(AddressError, match="from 0 to 65535"):
        Address("h", True)  # type: ignore[arg-type]


def test_as_an_argparse_type_the_error_is_argparse_s_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="prog")
    parser.add_argument("--listen", type=address_argument(allow_port_zero=True))
    assert parser.parse_args(["--listen", "[::]:0"]).listen == Address("::", 0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--listen", "h:70000"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "prog: error: argument --listen: 'h:70000' is not HOST:PORT (the port must be from 0 "
        "to 65535)")
