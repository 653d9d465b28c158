"""Start and talk to one session's long-lived bwrap sandbox.

Built on the shared policy (executor/policy/sandbox_policy.py, rendered by bwrap_args.py): the
same namespaces, seccomp
filter, read-only root, cgroups and rlimits as a single-use run, with two local changes that a
session needs (parameters of the policy's bwrap_argv): /workspace is a host directory bound
read-write (so files can be put and fetched from the host side) instead of a private tmpfs, and
the program is the supervisor serving cells (executor/policy/supervisor.py). The launcher's
hard kill (see launch_argv) bounds the session's whole life even if this process dies.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import fdwait
from executor.linux.cgroups import SandboxCgroup
from executor.linux.spawn import spawn_sandbox
from executor.policy import bwrap_args, wire
from executor.policy.bwrap_args import SandboxFds, bwrap_argv
from executor.policy.sandbox_policy import SandboxPolicy

# pip inside a session: the rootfs's Python is "externally managed" (PEP 668); installs go to
# the user site in the writable HOME (/workspace/.local), offline, without a cache.
SESSION_ENV = {
    "PIP_USER": "1",
    "PIP_BREAK_SYSTEM_PACKAGES": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "PIP_NO_INPUT": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


class SessionDied(SandboxFailed):
    """The session's sandbox is gone (killed, reaped, crashed); its state is lost."""


class ReplyTooLarge(SessionDied):
    """The session announced a reply past its cap; nothing more is read, the session ends."""


# Room for the reply's own fields around its two output strings.
REPLY_MARGIN_BYTES = 64 * 1024


def max_reply_bytes(limits: Limits) -> int:
    """The largest reply the host reads from a session's driver.

    The driver caps stdout and stderr at max_output_bytes each, but the cell runs in the
    driver's own process and can write anything on the reply pipe: the host never buffers
    more than an honest reply can be. JSON may spell each output byte in up to 6 (a
    replacement character or control byte as a \\uXXXX escape).
    """
    return 2 * 6 * limits.max_output_bytes + REPLY_MARGIN_BYTES


def driver_source() -> str:
    """The session's program: the one in-sandbox supervisor, in its session mode."""
    return bwrap_args.driver_source()


def session_argv(
    *, rootfs: str, workdir: str, limits: Limits, fds: SandboxFds, config: str
) -> list[str]:
    """The policy's argv with the workspace bound from the host and the REPL driver as program.

    Not PID 1: bwrap's own init reaps the orphans that bash cells leave behind; the driver is
    the user's own process anyway, so it gains nothing from being PID 1. No `-I` either: it
    would ignore SESSION_ENV's PYTHON* variables and pip's user site in /workspace/.local.
    """
    program = ["/usr/bin/python3", "-c", driver_source(), str(fds.job), str(fds.status), config]
    return bwrap_argv(
        SandboxPolicy.of(limits, workspace=Path(workdir)),
        rootfs=rootfs,
        fds=fds,
        command=program,
        extra_env=SESSION_ENV,
        as_pid_1=False,
    )


class SessionChannel(abc.ABC):
    """A running session sandbox, whichever backend holds it: send a command, read its reply
    (the driver's framing, capped on its header); `kill()` ends it for good."""

    def __init__(self, max_reply: int) -> None:
        self.max_reply = max_reply
        # Until the driver's ready frame, nothing else; after it, cell replies only.
        self._frames = wire.FrameReader({b"r": 0})

    @property
    @abc.abstractmethod
    def pid(self) -> int:
        """Host pid of the sandbox's outermost process (tests check it is really gone)."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    @abc.abstractmethod
    def send(self, message: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None:
        """End the sandbox's processes but keep its descriptors: a cell reading a reply on
        another thread sees the end (SessionDied) instead of a descriptor closed under it,
        whose number the process could already have given to another file."""

    @abc.abstractmethod
    def kill(self) -> None:
        """SIGKILL every process of the sandbox and release what it held."""

    @abc.abstractmethod
    def stop_counters(self) -> tuple[bool, bool]:
        """(an OOM kill happened, the pids cap was hit): why a sandbox that died ended."""

    @abc.abstractmethod
    def _read_some(self, timeout: float) -> bytes | None:
        """Reply bytes; b"" once the sandbox has ended, None if `timeout` passed first."""

    def receive(self, *, deadline: float) -> dict[str, Any]:
        """The next reply ({"ready": True} first), or SessionDied if the sandbox ends, sends
        what the wire format refuses (wire.py; ReplyTooLarge past the cap, on the header) or
        `deadline` passes first."""
        data: bytes | None = b""
        while True:
            try:
                for kind, body in self._frames.feed(data or b""):
                    return self._reply(kind, body)
            except wire.FrameTooLarge as exc:
                raise ReplyTooLarge(
                    f"the session's reply was larger than {self.max_reply} bytes ({exc})"
                ) from exc
            except wire.WireError as exc:
                raise SessionDied(str(exc)) from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SessionDied("no reply before the deadline")
            data = self._read_some(remaining)
            if data == b"":
                raise SessionDied("the session sandbox exited")

    def _reply(self, kind: bytes, body: bytes) -> dict[str, Any]:
        if kind == b"r":
            self._frames.caps = {b"c": self.max_reply}
            return {"ready": True}
        return wire.parse_json(kind, body, wire.CELL_REPLY)


class SessionSandbox(SessionChannel):
    """A session in a bwrap sandbox, driven over two pipes."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        cmd_w: int,
        reply_r: int,
        cgroup: SandboxCgroup | None,
        max_reply: int,
    ) -> None:
        super().__init__(max_reply)
        self.proc = proc
        self.cmd_w = cmd_w
        self.reply_r = reply_r
        self.cgroup = cgroup

    @classmethod
    def start(
        cls,
        *,
        rootfs: str,
        workdir: str,
        limits: Limits,
        lifetime_s: float,
        host_uid: int | None,
        cgroup_parents: dict[str, str],
    ) -> SessionSandbox:
        def argv_for(fds: SandboxFds, cgroup: SandboxCgroup | None) -> list[str]:
            memory_cgroup = bool(cgroup and cgroup.has_memory)
            rlimits = SandboxPolicy.of(limits).rlimits(memory_cgroup=memory_cgroup)
            config = json.dumps({"rlimits": rlimits, "max_output_bytes": limits.max_output_bytes})
            return session_argv(
                rootfs=rootfs, workdir=workdir, limits=limits, fds=fds, config=config
            )

        spawned = spawn_sandbox(
            argv_for,
            limits=limits,
            cgroup_parents=cgroup_parents,
            host_uid=host_uid,
            hard_limit_s=lifetime_s,
            stdio=(subprocess.DEVNULL, subprocess.DEVNULL, subprocess.PIPE),
            what="the session sandbox",
        )
        proc = spawned.proc
        sandbox = cls(
            proc, spawned.job_w, spawned.status_r, spawned.cgroup, max_reply_bytes(limits)
        )
        try:
            sandbox.receive(deadline=time.monotonic() + 30.0)
        except SessionDied as exc:
            detail = proc.stderr.read(4096).decode("utf-8", "replace") if proc.stderr else ""
            sandbox.kill()
            raise SandboxFailed(f"session sandbox did not start: {exc} {detail}".strip()) from exc
        except BaseException:
            sandbox.kill()  # at once, not at the launcher's hard kill a lifetime later
            raise
        return sandbox

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop_counters(self) -> tuple[bool, bool]:
        cgroup = self.cgroup
        return bool(cgroup and cgroup.oom_killed()), bool(cgroup and cgroup.pids_max_hit())

    def send(self, message: dict[str, Any]) -> None:
        view = memoryview(wire.json_frame(b"c", message))
        try:
            while view:
                view = view[os.write(self.cmd_w, view) :]
        except OSError as exc:
            raise SessionDied(f"the session sandbox is gone ({exc.strerror})") from exc

    def _read_some(self, timeout: float) -> bytes | None:
        if not fdwait.wait_readable(self.reply_r, timeout):
            return None
        return os.read(self.reply_r, 1 << 20)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def kill(self) -> None:
        """SIGKILL the whole tree, reap it, close our pipes and remove its cgroups."""
        self.stop()
        self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        for fd in (self.cmd_w, self.reply_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.cmd_w = self.reply_r = -1
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
