"""A hostile client for the slow-body tests: thousands of connections, from source addresses
127.0.0.2 and up, each sending a request head that declares a large body and then the body a
byte every few seconds; a connection the server closes (or refuses) is opened again a moment
later, so the load holds for as long as the client runs. It runs on a thread of the test
process (epoll, non-blocking sockets) and counts what the server did."""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

REOPEN_AFTER_S = 5.0


@dataclass
class Slot:
    address: str
    head: bytes
    sock: socket.socket | None = None
    opened_at: float = 0.0
    head_sent: bool = False
    answered: bool = False
    reopen_at: float = 0.0


@dataclass
class Tally:
    """What the server did to the hostile connections."""

    opened: int = 0
    refused: int = 0  # closed before any answer, within a second of opening
    answered: Counter[int] = field(default_factory=Counter)  # status -> connections
    closed_after_s: list[float] = field(default_factory=list)  # lifetimes of those it closed
    oldest_open_s: float = 0.0  # at the end, the age of the oldest still open


class Trickle(threading.Thread):
    def __init__(self, port: int, heads: list[bytes], *, addresses: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.port = port
        per_address = -(-len(heads) // addresses)
        self.slots = [
            Slot(address=f"127.0.0.{2 + n // per_address}", head=head)
            for n, head in enumerate(heads)
        ]
        self.every_s = every_s
        self.tally = Tally()
        self.stopping = threading.Event()
        self.all_opened = threading.Event()
        self._poller = select.epoll()
        self._by_fd: dict[int, Slot] = {}

    def run(self) -> None:
        for slot in self.slots:
            self._open(slot)
        self.all_opened.set()
        next_byte = time.monotonic() + self.every_s
        while not self.stopping.is_set():
            for fd, events in self._poller.poll(0.2):
                slot = self._by_fd.get(fd)
                if slot is not None:
                    self._event(slot, events)
            now = time.monotonic()
            if now >= next_byte:
                next_byte = now + self.every_s
                for slot in [s for s in self.slots if s.sock is not None and s.head_sent]:
                    self._send(slot, b"x")
            for slot in self.slots:
                if slot.sock is None and slot.reopen_at <= now:
                    self._open(slot)
        now = time.monotonic()
        ages = [now - s.opened_at for s in self.slots if s.sock is not None and s.head_sent]
        self.tally.oldest_open_s = max(ages, default=0.0)
        for slot in self.slots:
            if slot.sock is not None:
                self._forget(slot)
        self._poller.close()

    def stop(self) -> Tally:
        self.stopping.set()
        self.join()
        return self.tally

    def _open(self, slot: Slot) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((slot.address, 0))
        code = sock.connect_ex(("127.0.0.1", self.port))
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            slot.reopen_at = time.monotonic() + REOPEN_AFTER_S
            return
        slot.sock, slot.opened_at, slot.head_sent, slot.answered = (
            sock,
            time.monotonic(),
            False,
            False,
        )
        self._by_fd[sock.fileno()] = slot
        self._poller.register(sock.fileno(), select.EPOLLIN | select.EPOLLOUT)
        self.tally.opened += 1

    def _event(self, slot: Slot, events: int) -> None:
        assert slot.sock is not None
        if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            try:
                data = slot.sock.recv(65536)
            except OSError:
                data = b""
            if data:
                if not slot.answered and data.startswith(b"HTTP/1.1 "):
                    self.tally.answered[int(data.split(b" ", 2)[1])] += 1
                slot.answered = True
                return
            self._closed_by_server(slot)
            return
        if events & select.EPOLLOUT and not slot.head_sent:
            self._poller.modify(slot.sock.fileno(), select.EPOLLIN)
            slot.head_sent = True
            self._send(slot, slot.head)

    def _send(self, slot: Slot, data: bytes) -> None:
        assert slot.sock is not None
        try:
            slot.sock.send(data)
        except BlockingIOError:
            pass
        except OSError:
            self._closed_by_server(slot)

    def _closed_by_server(self, slot: Slot) -> None:
        lifetime = time.monotonic() - slot.opened_at
        if not slot.answered and lifetime < 1.0:
            self.tally.refused += 1
        else:
            self.tally.closed_after_s.append(lifetime)
        self._forget(slot)
        slot.reopen_at = time.monotonic() + REOPEN_AFTER_S

    def _forget(self, slot: Slot) -> None:
        assert slot.sock is not None
        fd = slot.sock.fileno()
        self._by_fd.pop(fd, None)
        self._poller.unregister(fd)
        slot.sock.close()
        slot.sock = None
