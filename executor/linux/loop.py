"""One run's event loop: feed the job and stdin, pump output, enforce the wall limit.

Single-threaded over one selector; other threads (a CancelToken) only wake it through a pipe.
Stopping is SIGTERM to the program, then SIGKILL to the whole sandbox after a grace period
(at once when the output cap is hit).

The loop ends as soon as the supervisor reports the program's wait status: the program wrote
all its output into the pipes before it exited, so what is buffered there is read without
blocking and the run is over. It does not wait for bwrap and its launcher to exit (they hold the
pipes open until then); tearing the sandbox down is the caller's job (a background reaper).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import signal
import threading
import time
from dataclasses import dataclass

from executor.cancel import CancelToken
from executor.images import ImageSet
from executor.linux.pool import Sandbox
from executor.policy import wire
from executor.policy.bwrap_args import IMAGE_CAPS
from executor.streaming import OutputPump

logger = logging.getLogger(__name__)

# After SIGKILL, how long we keep draining pipes before giving up on them.
_DRAIN_S = 5.0
_READ = 65536


@dataclass(frozen=True)
class Outcome:
    status: int | None  # raw wait status reported by the supervisor, None if it never came
    timed_out: bool
    cancelled: bool
    killed: bool  # we killed the sandbox (timeout, cancel or output cap)
    duration_s: float
    cpu_s: float | None = None  # the program's CPU time, from its supervisor's wait4
    # When the wall timer fired: how long the program had been running or runnable.
    runnable_s: float | None = None
    images: ImageSet = ImageSet()
    # Why the supervisor's status stream was refused (executor/policy/wire.py), if it was.
    refused: str | None = None


class RunLoop:
    def __init__(self, sandbox: Sandbox, pump: OutputPump, wall_s: float, grace_s: float) -> None:
        self.sandbox = sandbox
        self.pump = pump
        self.wall_s = wall_s
        self.grace_s = grace_s
        self.status: int | None = None
        self.cpu_s: float | None = None
        self.runnable_s: float | None = None
        self.timed_out = self.cancelled = self.killed = False
        self._kill_at: float | None = None
        self._status = StatusReader()
        self._end: float | None = None
        self._closed_writers: set[int] = set()
        self._stdin_fd = -1

    def run(self, payload: bytes, stdin: bytes, cancel: CancelToken | None) -> Outcome:
        proc = self.sandbox.proc
        assert proc.stdin and proc.stdout and proc.stderr
        self._stdin_fd = proc.stdin.fileno()
        waker = _Waker()
        sel = selectors.DefaultSelector()
        writers = {self.sandbox.job_w: memoryview(payload), proc.stdin.fileno(): memoryview(stdin)}
        for fd in writers:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_WRITE, "write")
        for fd, name in ((proc.stdout.fileno(), "stdout"), (proc.stderr.fileno(), "stderr")):
            os.set_blocking(fd, False)  # drained without blocking once the status is in
            sel.register(fd, selectors.EVENT_READ, name)
        sel.register(self.sandbox.status_r, selectors.EVENT_READ, "status")
        sel.register(waker.read_fd, selectors.EVENT_READ, "wake")
        if cancel is not None:
            cancel.on_cancel(waker.wake)
        start = time.monotonic()
        deadline = start + self.wall_s
        readers = 3
        try:
            while readers:
                now = time.monotonic()
                if not self._kill_at and now >= deadline:
                    self.timed_out = True
                    if self.sandbox.cgroup is not None:  # sampled before we stop it
                        self.runnable_s = self.sandbox.cgroup.runnable_s()
                    self._stop(now, self.grace_s)
                if self._kill_at is not None and now >= self._kill_at:
                    if self.killed:
                        break  # killed and still no EOF after draining: stop reading
                    self._kill_now(now)
                wait = (self._kill_at if self._kill_at is not None else deadline) - now
                for key, _ in sel.select(max(0.0, wait)):
                    fd, what = key.fd, key.data
                    if what == "write":
                        if self._write(fd, writers):
                            sel.unregister(fd)
                            self._close_writer(fd)
                    elif what == "wake":
                        os.read(fd, 64)
                        if not self.cancelled and not self.killed:
                            self.cancelled = True
                            self._stop(time.monotonic(), self.grace_s)
                    else:
                        data = os.read(fd, _READ)
                        if not data:
                            sel.unregister(fd)
                            readers -= 1
                        elif what == "status":
                            self._on_status(data, start)
                        elif not self.pump.feed(what, data) and not self.killed:
                            self._stop(time.monotonic(), 0.0)
                if self.status is not None and not self.killed:
                    self._drain(sel)
                    break
            end = self._end or time.monotonic()
        finally:
            sel.close()
            for fd in writers:
                self._close_writer(fd)
            waker.close()
            self.pump.close()
        return Outcome(
            self.status,
            self.timed_out,
            self.cancelled,
            self.killed,
            end - start,
            self.cpu_s,
            self.runnable_s,
            self._status.images(),
            self._status.error,
        )

    def _drain(self, sel: selectors.BaseSelector) -> None:
        """Read what the program left in its output pipes, up to the cap, without blocking."""
        for key in list(sel.get_map().values()):
            if key.data not in ("stdout", "stderr"):
                continue
            while True:
                try:
                    data = os.read(key.fd, _READ)
                except BlockingIOError:
                    break  # empty: a leftover process may still hold the pipe open
                if not data or not self.pump.feed(key.data, data):
                    break

    def _on_status(self, data: bytes, start: float) -> None:
        exit_line = self._status.feed(data)
        if exit_line is not None:
            self.status, self.cpu_s = exit_line
            self._end = time.monotonic()

    def _write(self, fd: int, writers: dict[int, memoryview]) -> bool:
        """Write what the pipe takes; True when done (or the reader is gone)."""
        pending = writers[fd]
        try:
            written = os.write(fd, pending[:_READ]) if pending else 0
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                return True
            raise
        writers[fd] = pending[written:]
        return not writers[fd]

    def _close_writer(self, fd: int) -> None:
        if fd in self._closed_writers:
            return
        self._closed_writers.add(fd)
        proc = self.sandbox.proc
        if proc.stdin is not None and fd == self._stdin_fd:
            # The program may have exited without reading: nothing left to deliver.
            with contextlib.suppress(OSError):
                proc.stdin.close()
        elif fd == self.sandbox.job_w:
            os.close(fd)
            self.sandbox.job_w = -1

    def _stop(self, now: float, grace_s: float) -> None:
        if self._kill_at is not None:
            return
        self._kill_at = now + grace_s
        if grace_s > 0:
            self.sandbox.signal_program(signal.SIGTERM)
        else:
            self._kill_now(now)

    def _kill_now(self, now: float) -> None:
        if self.killed:
            return
        self.killed = True
        self._end = self._end or now
        self.sandbox.kill()
        self._kill_at = now + _DRAIN_S


class StatusReader:
    """The supervisor's status pipe, in wire.py's frames: the output folder's entries it
    proposes (b"i", b"d", b"m"), then the program's status (b"s": wait status, CPU time).

    What it buffers is bounded by the frame caps and IMAGE_CAPS whatever arrives; a frame the
    wire format refuses ends the reading, so the run has no status and fails as a broken
    sandbox (`error` says why).
    """

    def __init__(self) -> None:
        caps = {b"r": 0, b"s": wire.SMALL_FRAME, **wire.IMAGE_FRAME_CAPS}
        self._frames = wire.FrameReader(caps)
        self._proposed = wire.ProposedImages(IMAGE_CAPS)
        self.error: str | None = None

    def feed(self, data: bytes) -> tuple[int, float | None] | None:
        """Take what arrived; the program's (wait status, CPU seconds) once its frame is in."""
        if self.error is not None:
            return None
        try:
            for kind, body in self._frames.feed(data):
                if kind == b"s":
                    status = wire.parse_json(kind, body, wire.RUN_STATUS)
                    return status["wait_status"], status["cpu_us"] / 1_000_000
                if kind != b"r":  # a cold sandbox's ready, when nobody waited for it
                    self._proposed.feed(kind, body)
        except wire.WireError as exc:
            self.error = str(exc)
            logger.warning("a sandbox's status stream was refused: %s", exc)
        return None

    def images(self) -> ImageSet:
        """The host's decision on what was proposed (nothing, if the reading broke)."""
        if self.error is not None:
            return ImageSet()
        try:
            return self._proposed.images()
        except wire.WireError:
            return ImageSet()


class _Waker:
    """Wakes the loop from a CancelToken's thread; harmless once the run is over.

    The token may fire after the run has closed its pipe, when the fd number may already
    belong to another run's pipe: the lock and flag make sure nothing is written then.
    """

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        self._lock = threading.Lock()
        self._closed = False

    def wake(self) -> None:
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):
                    os.write(self._write_fd, b"x")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            os.close(self.read_fd)
            os.close(self._write_fd)
