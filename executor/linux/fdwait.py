"""Waiting for file descriptors without select(): poll() has no FD_SETSIZE (1024) ceiling.

A busy host process (many client sockets) hands out descriptors above 1024, where select()
raises "filedescriptor out of range"; every wait in the executor goes through here or a
`selectors.DefaultSelector` instead.
"""

from __future__ import annotations

import select


def wait_readable(fd: int, timeout_s: float) -> bool:
    """True once `fd` is readable (or at EOF / in error), False if `timeout_s` passed first."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout_s) * 1000))


def wait_any(fds: tuple[int, ...], timeout_s: float) -> set[int]:
    """Those of `fds` readable (or at EOF / in error) once one is, or none after `timeout_s`."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return {fd for fd, _ in poller.poll(max(0.0, timeout_s) * 1000)}
