"""A warm pool of started, single-use Docker sandbox containers.

Starting a container costs a few hundred milliseconds (runc, namespaces, mounts); a pooled
container has paid that already and waits, idle, for its one run message. A container serves
exactly one run and is then removed: nothing (process, file, key) can carry over to the next.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

RETRY_AFTER_FAILURE_S = 2.0


@dataclass
class SandboxContainer:
    """A started container and the socket attached to its stdin, stdout and stderr."""

    id: str
    sock: socket.socket
    # The object docker-py returned; it owns the HTTP response that keeps the socket open.
    handle: Any = field(repr=False)

    def readable(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for data or EOF on the socket.

        poll, not select: a busy server's socket numbers can pass select's 1024 limit.
        """
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(max(timeout, 0) * 1000))

    def is_idle(self) -> bool:
        """True while the supervisor still waits: nothing (not even EOF) to read yet."""
        try:
            return not self.readable(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        # shutdown, not only close: docker-py's response object holds another reference to the
        # connection, and an open one keeps the container's stdin open and its output waiting.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class WarmPool:
    """Keeps `size` started containers ready; `take()` hands one out, never twice.

    Live requests come first: while a request starts a container of its own (`live()`), the
    fillers start none, so a refill never competes with a run for the engine; and a request
    that finds the pool empty takes the container a filler is already starting rather than
    starting another beside it.
    """

    def __init__(
        self,
        *,
        size: int,
        start: Callable[[], SandboxContainer],
        discard: Callable[[SandboxContainer], None],
        fillers: int = 2,
    ) -> None:
        self._size = size
        self._start = start
        self._discard = discard
        self._ready: list[SandboxContainer] = []
        self._starting = 0  # fillers' starts under way
        self._claims = 0  # requests waiting for one of those starts
        self._live = 0  # requests starting a container of their own
        self._closed = False
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._fill, name=f"docker-pool-{i}", daemon=True)
            for i in range(min(fillers, size))
        ]
        for thread in self._threads:
            thread.start()

    def take(self, timeout: float = 30.0) -> SandboxContainer | None:
        """A ready container, or None: the pool is empty and no filler start is left to wait
        for (the caller starts one under `live()`)."""
        while True:
            container = self._next(timeout)
            if container is None:
                return None
            if container.is_idle():
                return container
            logger.info("dropping a pooled container that ended", extra={"container": container.id})
            self._discard(container)

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        """Mark a request's own container start: the fillers wait until it is done."""
        with self._cond:
            self._live += 1
        try:
            yield
        finally:
            with self._cond:
                self._live -= 1
                self._cond.notify_all()

    def _next(self, timeout: float) -> SandboxContainer | None:
        deadline = time.monotonic() + timeout
        claimed = False
        with self._cond:
            try:
                while not self._closed:
                    if self._ready:
                        container = self._ready.pop(0)
                        self._cond.notify_all()
                        return container
                    if not claimed and self._starting > self._claims:
                        self._claims += 1
                        claimed = True
                    elif not claimed or self._starting < self._claims:
                        return None  # nothing under way is ours to wait for
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._cond.wait(left)
                return None
            finally:
                if claimed:
                    self._claims -= 1

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the pool is full (benchmarks and tests measure warm runs this way)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._ready) >= self._size, timeout)

    def ready_ids(self) -> list[str]:
        """Ids of the containers waiting in the pool, oldest first."""
        with self._cond:
            return [container.id for container in self._ready]

    def close(self) -> None:
        """Stop refilling and remove every container still waiting in the pool."""
        with self._cond:
            self._closed = True
            ready, self._ready = self._ready, []
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        for container in ready:
            self._discard(container)

    def _fill(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._closed
                        or (not self._live and len(self._ready) + self._starting < self._size)
                    )
                )
                if self._closed:
                    return
                self._starting += 1
            container = None
            try:
                container = self._start()
            except Exception:  # the engine may be restarting; keep trying, loudly
                logger.exception("could not start a pooled sandbox container")
            with self._cond:
                self._starting -= 1
                self._cond.notify_all()
                if container is None:
                    self._cond.wait(RETRY_AFTER_FAILURE_S)  # wakes early on close()
                    continue
                if not self._closed:
                    self._ready.append(container)
                    continue
            self._discard(container)  # started while the pool was closing


class Remover:
    """Removes used containers off the run's critical path, and says when all are gone.

    By the time a container is handed here its supervisor has killed and reaped every process
    of the run; what is left is Docker's own teardown (~50-100 ms), which the caller need not
    wait for. `settle()` waits for it; a crash leaves containers that `reap_stale` removes.
    """

    def __init__(self, remove: Callable[[str], None], workers: int = 2) -> None:
        self._remove = remove
        self._pending: list[str] = []
        self._busy = 0
        self._closed = False
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._work, name=f"docker-remover-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, container_id: str) -> None:
        with self._cond:
            self._pending.append(container_id)
            self._cond.notify_all()

    def settle(self, timeout: float) -> bool:
        """Wait until every submitted container is removed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 60.0) -> None:
        self.settle(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or bool(self._pending))
                if not self._pending:
                    return
                container_id = self._pending.pop(0)
                self._busy += 1
            try:
                self._remove(container_id)
            except Exception:  # logged; reap_stale catches it later by label
                logger.exception(
                    "could not remove a sandbox container", extra={"container": container_id}
                )
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()
