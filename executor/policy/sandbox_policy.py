"""What a sandbox may do, decided once: one value that every way of starting a sandbox renders.

`SandboxPolicy` holds the limits, the mounts, the network, the uid, the devices, the scratch
space, the environment and the rlimits of one sandbox. The backends only translate it:
bwrap's command line (policy/bwrap_args.py: single runs, the warm pool, the zygote's template,
sessions), Docker's create arguments (policy/docker_args.py: a container per run, a session's
container), and a zygote run's request and the template's payload (linux/zygote.py, read by
policy/zygote_child.py, which runs in the sandbox and imports nothing of ours). The seccomp
filter every one of them loads is policy/seccomp.py's; capabilities are always all dropped.
Tests: tests/executor/policy/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from executor.errors import InvalidLimits
from executor.images import OUTPUT_ENV
from executor.limits import Limits
from executor.policy.mounts import WORKSPACE_DIR, Mount, check_mounts

MIB = 1024 * 1024
# The uid and gid a program has inside its sandbox: the `sandbox` user of the root filesystem
# and of the Docker image alike. On the host it is another (linux/uids.py).
SANDBOX_UID = 1000
HOSTNAME = "sandbox"
WORKDIR = WORKSPACE_DIR
# What every program gets, before the spec's own allowlisted variables.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "LANG": "C.UTF-8",
    # matplotlib draws off-screen, and its font cache goes where it may write (/ is read-only).
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    **OUTPUT_ENV,
}
# Devices: bwrap's minimal /dev (null, zero, full, random, urandom, tty) and a run's own devpts,
# read-only, with a small fixed tmpfs on /dev/shm (POSIX semaphores, multiprocessing): not a
# place to store data. A container per run keeps the engine's devices and a smaller /dev/shm.
DEV_SHM_BYTES = 16 * MIB
CONTAINER_DEV_SHM_BYTES = 1 * MIB
# The only network mode a sandbox gets today; "allowlist" runs reach their hosts through the
# kinds' egress relay over a mounted socket, not through a network of their own.
NETWORKS = ("none",)


def program_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The program's whole environment: the base variables, then the spec's allowlist."""
    return {**BASE_ENV, **extra}


@dataclass(frozen=True)
class SandboxPolicy:
    """One sandbox's bounds. `workspace`: a host folder bound read-write at /workspace (a
    session's, so the host serves its files) instead of a private size-capped tmpfs."""

    limits: Limits
    mounts: tuple[Mount, ...] = ()
    workspace: Path | None = None
    uid: int = SANDBOX_UID
    hostname: str = HOSTNAME
    dev_shm_bytes: int = DEV_SHM_BYTES

    @classmethod
    def of(
        cls, limits: Limits, *, mounts: Sequence[Mount] = (), workspace: Path | None = None
    ) -> SandboxPolicy:
        return cls(limits=limits, mounts=tuple(mounts), workspace=workspace)

    def check_network(self, backend: str) -> None:
        """Fail closed (InvalidLimits) on a network mode `backend` cannot enforce yet."""
        if self.limits.network not in NETWORKS:
            raise InvalidLimits(
                f"the {backend} backend supports network='none' only, not {self.limits.network!r}"
            )

    @property
    def workspace_mounts(self) -> tuple[Mount, ...]:
        """The workspace's bind, or none: then /workspace is a private tmpfs of workdir_bytes."""
        return (Mount(self.workspace, WORKDIR, writable=True),) if self.workspace else ()

    def check_mounts(self) -> None:
        """InvalidSpec unless every mount, the workspace's included, may be given: absolute,
        canonical, existing folders, at most one per allowed destination (policy/mounts.py)."""
        check_mounts([*self.workspace_mounts, *self.mounts])

    @property
    def workdir_bytes(self) -> int:
        return self.limits.workdir_quota_mib * MIB

    @property
    def tmp_bytes(self) -> int:
        return self.limits.tmp_quota_mib * MIB

    def rlimits(self, *, memory_cgroup: bool, nproc: bool = True) -> dict[str, tuple[int, int]]:
        """Per-process limits the supervisor applies to the program (soft, hard).

        `nproc`: False where no user namespace of the sandbox's own counts it (a container:
        RLIMIT_NPROC would count every process of the uid on the host; pids_limit caps it).
        """
        limits = self.limits
        cpu = max(1, int(limits.cpu_time_s + 0.999))
        fsize = limits.max_file_size_mib * MIB
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
        if not nproc:
            del rlimits["RLIMIT_NPROC"]
        # With a memory cgroup the kernel enforces the real (resident) limit and we can report
        # an OOM kill; address space is then only a generous backstop, since runtimes reserve
        # far more virtual memory than they touch.
        address_space = limits.memory_bytes * (4 if memory_cgroup else 1)
        rlimits["RLIMIT_AS"] = (address_space, address_space)
        return rlimits
