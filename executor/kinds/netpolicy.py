"""Which network addresses a sandbox's traffic may reach, decided on the host.

Names are resolved here, once, and the connection goes to the very address that was checked,
so a name that later resolves elsewhere (DNS rebinding) cannot slip through.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from executor.errors import ExecutorError


class EgressRefused(ExecutorError):
    """The destination is not allowed for this run."""


def host_allowed(host: str, allowed_hosts: tuple[str, ...] | list[str]) -> bool:
    """Exact, case-insensitive name match; no wildcards, no trailing-dot games."""
    name = host.lower().rstrip(".")
    return any(name == allowed.lower().rstrip(".") for allowed in allowed_hosts)


def is_internal(address: str) -> bool:
    """Loopback, private, link-local, shared, reserved, multicast or unspecified."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def resolve(host: str, port: int, *, allow_private: bool) -> list[tuple[int, Any]]:
    """Addresses to connect to for host:port, or EgressRefused if any of them is internal.

    Refusing when ANY answer is internal (not just the first) stops a name that answers with
    both a public and a loopback address from being used to reach the host's own services.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise EgressRefused(f"cannot resolve {host}: {exc}") from exc
    found: list[tuple[int, Any]] = [(fam, addr) for fam, _, _, _, addr in infos]
    if not allow_private:
        for _, sockaddr in found:
            if is_internal(str(sockaddr[0])):
                raise EgressRefused(f"{host} resolves to an internal address ({sockaddr[0]})")
    return found


def connect(host: str, port: int, *, allow_private: bool, timeout_s: float = 10.0) -> socket.socket:
    """A TCP connection to host:port through the address policy."""
    last: OSError | None = None
    for family, sockaddr in resolve(host, port, allow_private=allow_private):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.settimeout(None)
        return sock
    raise last or EgressRefused(f"cannot connect to {host}:{port}")
