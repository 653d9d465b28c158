"""One Docker run: send the message, stream the framed output back, build the RunResult.

The supervisor (driver.py) enforces the limits and reports the program's wait status;
this side adds a wall-time backstop, cancellation, and an output cap of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from executor.backends.docker.pool import SandboxContainer
from executor.backends.docker.wire import (
    DOCKER_STDOUT,
    DockerDemux,
    driver_frames,
    proposed_images,
)
from executor.cancel import CancelToken
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.policy import wire
from executor.result import SUPERVISOR_LOST, OutputCallback, RunResult
from executor.stops import StopFacts, limit_that_stopped
from executor.streaming import OutputPump

logger = logging.getLogger(__name__)

# The supervisor enforces the wall limit; we kill the container this much later if it did not.
BACKSTOP_S = 3.0
MAX_DRIVER_STDERR = 8192
SIGKILL = 9


class _Engine(Protocol):
    def kill(self, container_id: str) -> None: ...

    def inspect_state(self, container_id: str) -> dict[str, Any]: ...


class DockerSession:
    """One run over one started container's attached socket."""

    def __init__(
        self,
        backend: _Engine,
        container: SandboxContainer,
        limits: Limits,
        on_output: OutputCallback | None,
        cancel: CancelToken | None,
    ) -> None:
        self.backend = backend
        self.container = container
        self.limits = limits
        self.cancel = cancel
        self.pump = OutputPump(on_output, limits.max_output_bytes)
        self.killed_for: str | None = None
        self.status: dict[str, Any] | None = None
        self.driver_stderr = bytearray()
        self.proposed = proposed_images()
        self._done = threading.Event()

    def run(self, message: bytes) -> RunResult:
        started = time.monotonic()
        if self.cancel is not None:
            self.cancel.on_cancel(lambda: self._kill("cancelled"))
        try:
            self.container.sock.sendall(message)
        except OSError as exc:
            raise SandboxFailed(f"cannot send the run to the sandbox: {exc}") from exc
        self._read(deadline=started + self.limits.wall_time_s + BACKSTOP_S)
        self._done.set()
        self.pump.close()
        return self._result(time.monotonic() - started)

    def _kill(self, reason: str) -> None:
        if self._done.is_set() or self.killed_for is not None:
            return
        self.killed_for = reason
        self.backend.kill(self.container.id)

    def _read(self, deadline: float) -> None:
        demux, frames = DockerDemux(), driver_frames()
        sock = self.container.sock
        while self.status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill("timed_out")
                deadline = time.monotonic() + BACKSTOP_S  # then wait for the EOF the kill causes
            if not self.container.readable(max(left, 0.05)):
                continue
            data = sock.recv(65536)
            if not data:
                return
            for stream, payload in demux.feed(data):
                if stream != DOCKER_STDOUT:
                    self.driver_stderr += payload[: MAX_DRIVER_STDERR - len(self.driver_stderr)]
                    continue
                for kind, body in frames.feed(payload):
                    self._frame(kind, body)

    def _frame(self, kind: bytes, body: bytes) -> None:
        if kind == b"s":
            self.status = wire.parse_json(kind, body, wire.CONTAINER_STATUS)
        elif kind in wire.IMAGE_FRAMES:
            self.proposed.feed(kind, body)
        elif not self.pump.feed("stdout" if kind == b"o" else "stderr", body):
            self._kill("truncated")  # the supervisor caps output too; this is the backstop

    def _result(self, duration: float) -> RunResult:
        status = self.status
        if status is None and self.killed_for is None:
            state = self.backend.inspect_state(self.container.id)
            if not state.get("OOMKilled"):
                return self._supervisor_lost(duration)
            status = {"exit_code": None, "signal": SIGKILL, "oom_killed": True}
        if status is None:
            truncated = self.killed_for == "truncated" or self.pump.truncated
            timed_out = self.killed_for == "timed_out"
            return RunResult(
                exit_code=None,
                signal=SIGKILL,
                timed_out=timed_out,
                oom_killed=False,
                truncated=truncated,
                duration_s=duration,
                cancelled=self.killed_for == "cancelled",
                limit="output" if truncated else "wall_time" if timed_out else None,
                stdout=self.pump.stdout,
                stderr=self.pump.stderr,
            )
        return self._from_status(status, duration)

    def _supervisor_lost(self, duration: float) -> RunResult:
        """A failed run, said so on its stderr: the supervisor ended with no status for it."""
        tail = self.driver_stderr[-500:].decode(errors="replace")
        logger.warning("a sandbox's supervisor ended without a status", extra={"tail": tail})
        self.pump.host_line(SUPERVISOR_LOST)
        return RunResult(
            exit_code=None,
            signal=None,
            timed_out=False,
            oom_killed=False,
            truncated=self.pump.truncated,
            duration_s=duration,
            stdout=self.pump.stdout,
            stderr=self.pump.stderr,
        )

    def _from_status(self, status: dict[str, Any], duration: float) -> RunResult:
        facts = StopFacts(
            exit_code=status.get("exit_code"),
            signal=status.get("signal"),
            cpu_s=status.get("cpu_s"),
            runnable_s=status.get("runnable_s"),
            wall_timer_fired=bool(status.get("timed_out")),
            output_capped=bool(status.get("truncated")) or self.pump.truncated,
            oom_killed=bool(status.get("oom_killed")),
            pids_max_hit=bool(status.get("pids_max_hit")),
            cancelled=self.killed_for == "cancelled",
        )
        limit = limit_that_stopped(facts, self.limits)
        found = self.proposed.images()
        return RunResult(
            exit_code=facts.exit_code,
            signal=facts.signal,
            timed_out=facts.wall_timer_fired or limit == "cpu_time",
            oom_killed=facts.oom_killed,
            truncated=facts.output_capped,
            duration_s=float(status.get("duration_s", duration)),
            cancelled=facts.cancelled,
            limit=limit,
            stdout=self.pump.stdout,
            stderr=self.pump.stderr,
            images=found.images,
            image_notes=found.notes,
        )
