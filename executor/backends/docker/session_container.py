"""A session's sandbox in a Docker container (DockerBackend.open_session).

The same REPL driver as under bwrap (executor/backends/session_channel.py: same framing, same
reply cap), run by the Docker supervisor in session mode (executor/backends/docker/driver.py), in
a container built by the one Docker policy (executor/policy/docker_args.py): no network, read-only
root, every capability dropped, memory and pids caps, the unprivileged uid, our seccomp filter
on Docker's. The workspace is the host folder the manager prepared (quota tmpfs, host-side file
API), bound at /workspace. The container ends when our attached socket closes, so it cannot
outlive this process; the supervisor also ends it at the session's lifetime.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from typing import Any, Protocol

from executor.backends import session_channel
from executor.backends.docker.pool import SandboxContainer
from executor.backends.docker.wire import DOCKER_STDOUT, DockerDemux
from executor.backends.session_channel import SESSION_ENV, FramedChannel, SessionDied
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.policy import wire
from executor.policy.docker_args import session_rlimits

SESSION_LABEL = "undoable.session"
# Marks the supervisor's stop facts among its stderr lines (serve_session in
# executor/backends/docker/driver.py).
FACTS_MARK = b"undoable-session-facts "
# What is kept of the supervisor's stderr: a start failure's message and its stop facts.
MAX_DIAGNOSTICS = 16 * 1024


class _Engine(Protocol):
    """What a session's container needs of the Docker backend that started it."""

    def start_session(
        self, *, workspace: str, limits: Limits, session: dict[str, Any], labels: dict[str, str]
    ) -> SandboxContainer: ...

    def inspect_state(self, container_id: str) -> dict[str, Any]: ...

    def kill(self, container_id: str) -> None: ...

    def remove(self, container_id: str) -> None: ...


class DockerSessionContainer(FramedChannel):
    """A session's container, driven over its attached socket."""

    def __init__(
        self, backend: _Engine, container: SandboxContainer, pid: int, max_reply: int
    ) -> None:
        super().__init__(max_reply)
        self.backend = backend
        self.container = container
        self._pid = pid
        self._demux = DockerDemux()
        self._diagnostics = bytearray()
        self._ended = False

    @classmethod
    def start(
        cls,
        backend: _Engine,
        *,
        session_id: str,
        workdir: str,
        limits: Limits,
        lifetime_s: float,
    ) -> DockerSessionContainer:
        config = {"rlimits": session_rlimits(limits), "max_output_bytes": limits.max_output_bytes}
        session = {
            "driver": session_channel.driver_source(),
            "config": json.dumps(config),
            "env": SESSION_ENV,
            "lifetime_s": lifetime_s,
            "facts_mark": FACTS_MARK.decode(),
        }
        container = backend.start_session(
            workspace=workdir, limits=limits, session=session, labels={SESSION_LABEL: session_id}
        )
        sandbox = cls(backend, container, 0, session_channel.max_reply_bytes(limits))
        try:
            sandbox._pid = int(backend.inspect_state(container.id).get("Pid") or 0)
            ready = sandbox.receive(deadline=time.monotonic() + 30.0)
            if ready != {"ready": True}:
                raise SessionDied(f"unexpected first reply {ready!r}")
        except SessionDied as exc:
            detail = sandbox._diagnostics.decode("utf-8", "replace")
            sandbox.kill()
            raise SandboxFailed(f"session sandbox did not start: {exc} {detail}".strip()) from exc
        except BaseException:
            sandbox.kill()
            raise
        return sandbox

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def alive(self) -> bool:
        # The engine closes our end when the container ends; unread replies do not count.
        return not self._ended and not _hung_up(self.container.sock)

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.container.sock.sendall(wire.json_frame(b"c", message))
        except OSError as exc:
            raise SessionDied(f"the session sandbox is gone ({exc.strerror})") from exc

    def _read_some(self, timeout: float) -> bytes | None:
        if not self.container.readable(timeout):
            return None
        try:
            data = self.container.sock.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self._ended = True
            return b""
        replies = bytearray()
        for stream, payload in self._demux.feed(data):
            if stream == DOCKER_STDOUT:
                replies += payload
            else:  # the supervisor's own stderr: no cell can write there
                self._diagnostics += payload[: MAX_DIAGNOSTICS - len(self._diagnostics)]
        return bytes(replies)

    def stop_counters(self) -> tuple[bool, bool]:
        """From the supervisor's last words; once it has hung up, read what is left of them."""
        if not self._ended and _hung_up(self.container.sock):
            while self._read_some(1.0):
                pass
        for line in reversed(self._diagnostics.splitlines()):
            if line.startswith(FACTS_MARK):
                facts = json.loads(line[len(FACTS_MARK) :])
                return bool(facts["oom_killed"]), bool(facts["pids_max_hit"])
        return False, False

    def stop(self) -> None:
        """Hang up our end (the engine then ends the container; a reader sees the end)."""
        with contextlib.suppress(OSError):
            self.container.sock.shutdown(socket.SHUT_RDWR)
        self.backend.kill(self.container.id)

    def kill(self) -> None:
        """Close our socket, then kill and remove the container.

        Closing first matters: the engine does not finish a container whose attached output
        nobody reads (a cell flooding its reply), and the closed stdin already ends it.
        """
        self._ended = True
        self.container.close()
        self.backend.remove(self.container.id)


def _hung_up(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    with contextlib.suppress(OSError, ValueError):
        return bool(poller.poll(0))
    return True
