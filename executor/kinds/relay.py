"""Relaying bytes both ways between two sockets inside one selector loop, with bounded buffers.

Used by the host's egress proxy and, copied next to it into the run's control folder, by the
in-sandbox forwarder (egress_forwarder.py): so it imports the standard library only.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
from collections.abc import Callable
from typing import Any

BUF_BYTES = 65536
READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE


def watch(sel: selectors.BaseSelector, sock: socket.socket, events: int, data: Any) -> None:
    """Make `sock`'s interest in `sel` exactly `events` (0: not registered)."""
    key = sel.get_map().get(sock)
    if not events:
        if key is not None:
            sel.unregister(sock)
    elif key is None:
        sel.register(sock, events, data)
    elif key.events != events or key.data is not data:
        sel.modify(sock, events, data)


class Tunnel:
    """Two connected sockets; each one's bytes go to the other through a bounded buffer.

    A side is read only while the buffer toward its peer has room, so a peer that does not read
    stops the side that writes to it (backpressure) instead of growing memory. An EOF is passed
    on as a half-close once the bytes before it are written. `done` once both directions have
    ended, or at the first socket error. The owner's loop calls `handle` for the selector's
    events on either socket (registered with `data`, by default the tunnel itself) and `close`
    when done. `from_a`, when given, turns each chunk read from `a` into what is sent to `b`
    (ValueError: the tunnel fails).
    """

    def __init__(
        self,
        sel: selectors.BaseSelector,
        a: socket.socket,
        b: socket.socket,
        *,
        to_a: bytes = b"",
        to_b: bytes = b"",
        data: Any = None,
        limit: int = BUF_BYTES,
        from_a: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.sel = sel
        self.rewrite = {a: from_a} if from_a is not None else {}
        self.data = self if data is None else data
        self.limit = limit
        self.peer = {a: b, b: a}
        self.outbox = {a: bytearray(to_a), b: bytearray(to_b)}  # bytes still to write to it
        self.ended = {a: False, b: False}  # this side will send nothing more
        self.shut = {a: False, b: False}  # its write end is shut (the peer's EOF passed on)
        self.failed = False
        for sock in (a, b):
            sock.setblocking(False)
        self._rewatch()

    @property
    def done(self) -> bool:
        return self.failed or all(self.shut.values())

    def handle(self, sock: socket.socket, mask: int) -> None:
        if mask & READ:
            self._read(sock)
        if mask & WRITE and not self.failed:
            self._write(sock)
        if not self.failed:
            self._rewatch()

    def close(self) -> None:
        for sock in self.peer:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(sock)
            sock.close()

    def _read(self, sock: socket.socket) -> None:
        inbox = self.outbox[self.peer[sock]]
        room = self.limit - len(inbox)
        if room <= 0:  # a first message larger than the buffer: wait until it is written
            return
        try:
            chunk = sock.recv(room)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.failed = True
            return
        rewrite = self.rewrite.get(sock)
        if chunk and rewrite is not None:
            try:
                inbox += rewrite(chunk)
            except ValueError:
                self.failed = True
        elif chunk:
            inbox += chunk
        else:
            self.ended[sock] = True

    def _write(self, sock: socket.socket) -> None:
        outbox = self.outbox[sock]
        try:
            sent = sock.send(outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.failed = True
            return
        del outbox[:sent]

    def _rewatch(self) -> None:
        for sock, peer in self.peer.items():
            if self.ended[peer] and not self.outbox[sock] and not self.shut[sock]:
                self.shut[sock] = True
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
            reading = not self.ended[sock] and len(self.outbox[peer]) < self.limit
            events = (READ if reading else 0) | (WRITE if self.outbox[sock] else 0)
            watch(self.sel, sock, events, self.data)
