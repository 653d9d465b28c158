"""The sandbox policy: the bwrap command line and the program's rlimits, as pure functions.

Everything that decides what a sandboxed program can see or do is here, so it can be read and
unit-tested in one place (tests/executor/test_bwrap_policy.py).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from executor.errors import InvalidLimits
from executor.limits import Limits
from executor.policy.mounts import WORKSPACE_DIR, Mount, bwrap_mount_args

SANDBOX_UID = 1000  # the `sandbox` user of the root filesystem
WORKDIR = WORKSPACE_DIR
# What every program gets, before the spec's own allowlisted variables.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "LANG": "C.UTF-8",
}
# Small fixed tmpfs for /dev/shm (POSIX semaphores, multiprocessing): not a place to store data.
DEV_SHM_BYTES = 16 * 1024 * 1024
# Extra seconds the external `timeout` allows past the wall limit; our own kill comes first.
HARD_KILL_GRACE_S = 5


@dataclass(frozen=True)
class SandboxFds:
    """Host file descriptors inherited by bwrap (same numbers inside the sandbox)."""

    seccomp: int  # read end holding the BPF program; bwrap reads and closes it
    job: int  # read end: the driver receives its one job here
    status: int  # write end: the driver reports "ready" and the program's wait status


@cache
def driver_source() -> str:
    """The in-sandbox supervisor's source, passed to python3 with -c (no host file is bound)."""
    return (Path(__file__).with_name("driver.py")).read_text()


def bwrap_argv(
    *,
    rootfs: str,
    limits: Limits,
    fds: SandboxFds,
    hard_limit_s: float,
    mounts: Sequence[Mount] = (),
) -> list[str]:
    """The full command: `timeout -s KILL` around bwrap around the in-sandbox driver.

    `hard_limit_s` bounds the sandbox's whole life even if the calling process is wedged
    (if it dies, --die-with-parent fires when `timeout` goes too). `mounts` (checked by
    executor/policy/mounts.py) are bound over the scratch tmpfs, before everything is
    remounted read-only.
    """
    if limits.network != "none":
        raise InvalidLimits("the bwrap backend only supports network='none' for now")
    if not os.path.isabs(rootfs):
        raise InvalidLimits(f"rootfs must be an absolute path, not {rootfs!r}")
    outer = ["timeout", "-s", "KILL", f"{int(hard_limit_s + HARD_KILL_GRACE_S)}s"]
    return [
        *outer,
        "bwrap",
        # Fresh user, pid, net, ipc, uts and cgroup namespaces; no nested user namespaces.
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--new-session",
        "--die-with-parent",
        "--as-pid-1",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        "sandbox",
        # The root filesystem, read-only; only the sandbox's own /proc and a minimal /dev.
        "--ro-bind",
        rootfs,
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(DEV_SHM_BYTES),
        "--tmpfs",
        "/dev/shm",
        # Private, size-capped scratch space; nothing from the host is writable.
        "--size",
        str(limits.workdir_quota_mib * 1024 * 1024),
        "--perms",
        "0700",
        "--tmpfs",
        WORKDIR,
        "--size",
        str(limits.tmp_quota_mib * 1024 * 1024),
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        *bwrap_mount_args(mounts),
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        WORKDIR,
        "--cap-drop",
        "ALL",
        "--seccomp",
        str(fds.seccomp),
        # bwrap itself starts with an empty environment; these reach the driver only.
        *_setenv(BASE_ENV),
        "--",
        "/usr/bin/python3",
        "-I",
        "-c",
        driver_source(),
        str(fds.job),
        str(fds.status),
    ]


def _setenv(env: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def program_env(spec_env: dict[str, str]) -> dict[str, str]:
    """The program's whole environment: the base variables, then the spec's allowlist."""
    return {**BASE_ENV, **spec_env}


def program_rlimits(limits: Limits, *, memory_cgroup: bool) -> dict[str, tuple[int, int]]:
    """Per-process limits the driver applies to the program (soft, hard)."""
    cpu = max(1, int(limits.cpu_time_s + 0.999))
    fsize = limits.max_file_size_mib * 1024 * 1024
    rlimits = {
        # SIGXCPU at the soft limit, SIGKILL one second later.
        "RLIMIT_CPU": (cpu, cpu + 1),
        "RLIMIT_FSIZE": (fsize, fsize),
        "RLIMIT_NOFILE": (limits.max_open_files, limits.max_open_files),
        # Counted per user in the sandbox's own user namespace: this sandbox only.
        "RLIMIT_NPROC": (limits.max_pids, limits.max_pids),
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_MEMLOCK": (0, 0),
    }
    # With a memory cgroup the kernel enforces the real (resident) limit and we can report an
    # OOM kill; address space is then only a generous backstop, since runtimes reserve far
    # more virtual memory than they touch.
    address_space = limits.memory_bytes * (4 if memory_cgroup else 1)
    rlimits["RLIMIT_AS"] = (address_space, address_space)
    return rlimits


def rlimit_names_known() -> bool:
    """True when this Python knows every rlimit the policy sets (self-check)."""
    return all(hasattr(resource, name) for name in program_rlimits(Limits(), memory_cgroup=False))
