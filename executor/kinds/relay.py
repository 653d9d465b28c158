"""A host-side relay from a unix socket (bound into a sandbox) to one fixed TCP address.

The sandbox has no network; this is its only road to the database. The relay decides the
destination (the sandbox cannot name another) and accepts a limited number of connections,
so a program cannot open a second, unguarded session with the same credential.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)
_BUF = 65536


class UnixRelay:
    def __init__(
        self,
        path: Path,
        connect: Callable[[], socket.socket],
        *,
        max_connections: int = 1,
    ) -> None:
        self.path = Path(path)
        self._connect = connect
        self._left = max_connections
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        os.chmod(self.path, 0o666)  # noqa: S103 - the sandbox's unprivileged uid must connect
        self._server.listen(4)
        self._sockets: list[socket.socket] = [self._server]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept_loop, name="undoable-relay", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                allowed = self._left > 0
                self._left -= 1
            if not allowed:
                logger.info("relay refused an extra connection", extra={"path": str(self.path)})
                client.close()
                continue
            try:
                upstream = self._connect()
            except OSError as exc:
                logger.info("relay could not connect", extra={"error": str(exc)})
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


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
