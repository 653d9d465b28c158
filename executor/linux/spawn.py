"""Start one bwrap sandbox process: the sequence every bwrap sandbox shares.

A single-use run's sandbox (pool.Sandbox) and a session's (executor/backends/bwrap/session.py)
differ only in the program bwrap runs and what they do with its pipes. Both get: their own cgroups
with the run's limits (created before the process, so it starts inside them), the seccomp
filter on a pipe, a job pipe the host writes and a status pipe the host reads, the launcher in
front (cgroup join, uid drop, hard kill), no host environment, a session of its own.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux.cgroups import SandboxCgroup
from executor.policy.bwrap_args import SandboxFds, launch_argv
from executor.policy.seccomp import seccomp_pipe

# The bwrap argv for the sandbox's fds, given the cgroup it starts in (None without cgroups).
ArgvFor = Callable[[SandboxFds, SandboxCgroup | None], list[str]]
# subprocess's stdin/stdout/stderr choices (PIPE, DEVNULL).
Stdio = int


@dataclass
class Spawned:
    proc: subprocess.Popen[bytes]
    cgroup: SandboxCgroup | None
    job_w: int  # the host's end of the program's job pipe
    status_r: int  # the host's end of the program's status pipe


def spawn_sandbox(
    argv_for: ArgvFor,
    *,
    limits: Limits,
    cgroup_parents: dict[str, str],
    host_uid: int | None,
    hard_limit_s: float,
    stdio: tuple[Stdio, Stdio, Stdio],
    what: str,
) -> Spawned:
    """Start the sandbox; SandboxFailed ("could not start <what>") if the process can't be.

    A refused policy (InvalidSpec, InvalidLimits from `argv_for`) propagates as it is. On any
    failure nothing is left behind: no cgroup, no open pipe end.
    """
    cgroup = SandboxCgroup.create(cgroup_parents) if cgroup_parents else None
    theirs: list[int] = []  # the sandbox's pipe ends: closed here once it holds them
    ours: list[int] = []  # kept by the caller, closed here only if the start fails
    try:
        if cgroup is not None:
            cgroup.apply(limits)
        seccomp_r = seccomp_pipe()
        theirs.append(seccomp_r)
        job_r, job_w = os.pipe()
        theirs.append(job_r)
        ours.append(job_w)
        status_r, status_w = os.pipe()
        theirs.append(status_w)
        ours.append(status_r)
        fds = SandboxFds(seccomp=seccomp_r, job=job_r, status=status_w)
        argv = launch_argv(
            argv_for(fds, cgroup),
            cgroup_procs=cgroup.procs_files if cgroup else (),
            host_uid=host_uid,
            hard_limit_s=hard_limit_s,
        )
        stdin, stdout, stderr = stdio
        proc = subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=tuple(theirs),
            env={},  # bwrap itself must not carry the host environment (/proc/1/environ)
            start_new_session=True,
        )
    except BaseException as exc:
        for fd in ours:
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()
        if isinstance(exc, OSError):
            raise SandboxFailed(f"could not start {what}: {exc}") from exc
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    return Spawned(proc, cgroup, job_w, status_r)
