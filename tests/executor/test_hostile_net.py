"""Hostile programs after the network and the host's own services.

The programs and their checks live in deny_net.py (shared with test_sabotage.py).
"""

from __future__ import annotations

import deny_net as cases
from hostile_kit import SandboxRunner


def test_deny_connecting_to_an_outside_ip(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.OUTSIDE_IP)


def test_deny_connecting_to_a_server_on_the_hosts_loopback(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.HOST_LOOPBACK)


def test_deny_connecting_to_the_host_on_its_own_addresses(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.HOST_ADDRESSES)


def test_deny_dns(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.DNS)
