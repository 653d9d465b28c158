"""The egress address policy as pure functions."""

from __future__ import annotations

import pytest

from executor.kinds.egress import allowed, parse_target
from executor.kinds.netpolicy import EgressRefused, is_internal, resolve


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("api.example.com", ("api.example.com", None)),
        ("H.io.:8080", ("h.io", 8080)),
        ("[::1]:443", ("::1", 443)),
        ("[2001:db8::1]", ("2001:db8::1", None)),
    ],
)
def test_it_parses_host_and_port(entry, expected):
    assert parse_target(entry) == expected


def test_a_bare_name_allows_only_the_web_ports():
    hosts = ("api.example.com",)
    assert allowed("API.example.com.", 443, hosts)
    assert allowed("api.example.com", 80, hosts)
    assert not allowed("api.example.com", 6379, hosts)
    assert not allowed("evil-api.example.com", 443, hosts)
    assert not allowed("api.example.com.evil.io", 443, hosts)


def test_a_name_with_a_port_allows_that_port_only():
    assert allowed("127.0.0.1", 8080, ("127.0.0.1:8080",))
    assert not allowed("127.0.0.1", 6379, ("127.0.0.1:8080",))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ],
)
def test_internal_addresses_are_internal(address):
    assert is_internal(address)


def test_a_public_address_is_not_internal():
    assert not is_internal("93.184.216.34")


def test_a_name_resolving_to_loopback_is_refused():
    with pytest.raises(EgressRefused, match="internal address"):
        resolve("localhost", 80, allow_private=False)
    assert resolve("localhost", 80, allow_private=True)
