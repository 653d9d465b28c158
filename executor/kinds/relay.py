"""Copying bytes between two sockets, for the egress proxy's tunnels."""

from __future__ import annotations

import contextlib
import socket

_BUF = 65536


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until EOF, then half-close dst."""
    try:
        while data := src.recv(_BUF):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
