"""One session's long-lived bwrap sandbox (BwrapBackend.open_session).

Built on the shared policy (executor/policy/sandbox_policy.py, rendered by bwrap_args.py): the
same namespaces, seccomp filter, read-only root, cgroups and rlimits as a single-use run, with
two local changes that a session needs (parameters of the policy's bwrap_argv): /workspace is a
host directory bound read-write (so files can be put and fetched from the host side) instead of
a private tmpfs, and the program is the REPL driver. The launcher's hard kill (see launch_argv)
bounds the session's whole life even if this process dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from executor.backends import session_channel
from executor.backends.session_channel import SESSION_ENV, FramedChannel, SessionDied
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import fdwait
from executor.linux.cgroups import SandboxCgroup
from executor.linux.spawn import spawn_sandbox
from executor.policy import wire
from executor.policy.bwrap_args import SandboxFds, bwrap_argv
from executor.policy.sandbox_policy import SandboxPolicy


def session_argv(
    *, rootfs: str, workdir: str, limits: Limits, fds: SandboxFds, config: str
) -> list[str]:
    """The policy's argv with the workspace bound from the host and the REPL driver as program.

    Not PID 1: bwrap's own init reaps the orphans that bash cells leave behind; the driver is
    the user's own process anyway, so it gains nothing from being PID 1. No `-I` either: it
    would ignore SESSION_ENV's PYTHON* variables and pip's user site in /workspace/.local.
    """
    driver = session_channel.driver_source()
    program = ["/usr/bin/python3", "-c", driver, str(fds.job), str(fds.status), config]
    return bwrap_argv(
        SandboxPolicy.of(limits, workspace=Path(workdir)),
        rootfs=rootfs,
        fds=fds,
        command=program,
        extra_env=SESSION_ENV,
        as_pid_1=False,
    )


class BwrapSession(FramedChannel):
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
    ) -> BwrapSession:
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
            proc,
            spawned.job_w,
            spawned.status_r,
            spawned.cgroup,
            session_channel.max_reply_bytes(limits),
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
