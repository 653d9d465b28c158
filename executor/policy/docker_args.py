"""The sandbox policy rendered for Docker: `containers.create` kwargs, as pure functions.

What a sandboxed program may do is decided in policy/sandbox_policy.py; this module turns a
SandboxPolicy into a locked-down container (tests/executor/policy/test_docker_policy.py). The
program, its files, stdin and environment never
appear in these arguments: they travel on the attached stdin, so `docker inspect` shows none
of them (secrets included).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from executor.errors import InvalidSpec
from executor.limits import Limits
from executor.policy.sandbox_policy import CONTAINER_DEV_SHM_BYTES, MIB, WORKDIR, SandboxPolicy

SANDBOX_LABEL = "undoable.sandbox"
# One CPU: enough for one program, and a busy loop cannot starve the host's other core.
NANO_CPUS = 1_000_000_000
# The supervisor (PID 1) counts against the pids limit; the program gets max_pids of its own.
SUPERVISOR_PIDS = 1
# Where the zygote's template container finds the host folder with its control socket.
TEMPLATE_SOCKET_FOLDER = "/run/undoable"
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$")
_LABEL_KEY = re.compile(r"^undoable\.[a-z0-9.-]{1,60}$")


def pool_key(limits: Limits) -> tuple[Any, ...]:
    """The part of the limits fixed at container creation; runs with equal keys share a pool.

    Wall time, CPU time, output and file-size limits are enforced per run by the supervisor,
    so they are not part of the key.
    """
    return (
        limits.memory_mib,
        limits.max_pids,
        limits.workdir_quota_mib,
        limits.tmp_quota_mib,
        limits.max_open_files,
        limits.network,
    )


def check_network(limits: Limits) -> None:
    """Fail closed (InvalidLimits) on a network mode Docker cannot enforce yet."""
    SandboxPolicy.of(limits).check_network("docker")


def container_create_kwargs(
    policy: SandboxPolicy, *, image: str, command: list[str], labels: dict[str, str]
) -> dict[str, Any]:
    """`policy` rendered as the kwargs for `client.containers.create(**kwargs)` of one sandbox
    container.

    The policy's workspace (a session's host folder, so the host serves its files) is bound
    read-write at /workspace instead of a private tmpfs; a container takes no other mount.
    Raises InvalidLimits for a network mode Docker cannot enforce yet (fail closed) and
    InvalidSpec for an image name, label or workspace that could smuggle options in.
    """
    policy.check_network("docker")
    limits = policy.limits
    workspace = None if policy.workspace is None else str(policy.workspace)
    if policy.mounts:
        raise InvalidSpec("a container takes no mounts but its workspace")
    if not _IMAGE.match(image):
        raise InvalidSpec(f"invalid image name {image!r}")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise InvalidSpec("command must be a non-empty list of strings")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key) or key == SANDBOX_LABEL or not isinstance(value, str):
            raise InvalidSpec(f"invalid label {key!r}")
    if workspace is not None and not _canonical_folder(workspace):
        raise InvalidSpec(f"the workspace must be a canonical absolute folder, not {workspace!r}")
    memory = _mib(limits.memory_mib)
    nofile = max(int(limits.max_open_files), 64)
    tmpfs = {
        WORKDIR: _tmpfs(policy, policy.workdir_bytes, mode="0700"),
        "/tmp": _tmpfs(policy, policy.tmp_bytes, mode="1777"),
    }
    mounts: dict[str, Any] = {}
    if workspace is not None:
        del tmpfs[WORKDIR]
        # Private propagation: nothing mounted later on either side reaches the other.
        bind = {"Propagation": "rprivate"}
        mounts["mounts"] = [
            {"Type": "bind", "Source": workspace, "Target": WORKDIR, "BindOptions": bind}
        ]
    return {
        **mounts,
        "image": image,
        "command": command,
        # detach=False + stdin_open sets StdinOnce: when our attached socket closes (even if
        # our process dies), the supervisor sees EOF and the container ends.
        "detach": False,
        "stdin_open": True,
        "tty": False,
        "user": f"{policy.uid}:{policy.uid}",
        "working_dir": WORKDIR,
        "environment": {},
        "labels": {**labels, SANDBOX_LABEL: "1"},
        "network_mode": "none",
        # Also skip the engine's network setup for mode none: runc still gives the container
        # a network namespace of its own with only `lo`, and the start costs about half.
        "network_disabled": True,
        "cap_drop": ["ALL"],
        # Docker's default seccomp profile stays on: we never pass seccomp=... here.
        "security_opt": ["no-new-privileges"],
        "privileged": False,
        "read_only": True,
        "tmpfs": tmpfs,
        "shm_size": CONTAINER_DEV_SHM_BYTES,
        "ipc_mode": "private",
        "pids_limit": int(limits.max_pids) + SUPERVISOR_PIDS,
        "mem_limit": memory,
        "memswap_limit": memory,  # equal: no swap on top of the memory limit
        "nano_cpus": NANO_CPUS,
        "ulimits": [
            {"name": "core", "soft": 0, "hard": 0},
            # The supervisor sets the program's exact limit; this is the outer bound.
            {"name": "nofile", "soft": nofile, "hard": nofile},
        ],
        # The supervisor is the init (see executor/backends/docker/driver.py), so Docker's own init
        # stays off.
        "init": False,
        # Output travels over the attached socket; nothing is written to disk by the engine.
        "log_config": {"type": "none", "config": {}},
        "auto_remove": True,
    }


def template_container_kwargs(
    *,
    image: str,
    command: list[str],
    labels: dict[str, str],
    uid: int,
    socket_folder: str,
    limits: Limits,
    seccomp_profile: dict[str, Any],
) -> dict[str, Any]:
    """The kwargs for `api.create_container(**kwargs)` of the container the zygote's
    template runs in (backends/docker/template.py, docs/zygote.md).

    Locked down like a run's container (no network, no capability, read-only root, no new
    privileges, memory and pids caps), as host uid `uid`, with `socket_folder` bound at
    TEMPLATE_SOCKET_FOLDER for its control socket. Two things differ, both for making runs:
    `seccomp_profile` (seccomp.docker_profile(zygote=True): our deny list without the
    namespace and mount calls each run is made with; the template loads the same filter as BPF
    itself, and each run the full one), and unmasked system paths, without which the kernel
    refuses a run its own /proc. The template covers the container's /sys, /dev/mqueue and
    the socket folder before any run.
    """
    if not _IMAGE.match(image):
        raise InvalidSpec(f"invalid image name {image!r}")
    for key in labels:
        if not _LABEL_KEY.match(key) or key == SANDBOX_LABEL:
            raise InvalidSpec(f"invalid label {key!r}")
    if not _canonical_folder(socket_folder):
        raise InvalidSpec(f"the socket folder must be canonical, not {socket_folder!r}")
    memory = _mib(limits.memory_mib)
    return {
        "image": image,
        "command": command,
        "user": f"{uid}:{uid}",
        "working_dir": "/",
        "environment": [],
        "labels": {**labels, SANDBOX_LABEL: "1"},
        "network_disabled": True,
        # The Engine API's own names: the SDK has none for MaskedPaths and ReadonlyPaths.
        "host_config": {
            "NetworkMode": "none",
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges", f"seccomp={json.dumps(seccomp_profile)}"],
            # What `--security-opt systempaths=unconfined` sends.
            "MaskedPaths": [],
            "ReadonlyPaths": [],
            "Privileged": False,
            "ReadonlyRootfs": True,
            "IpcMode": "private",
            "Binds": [f"{socket_folder}:{TEMPLATE_SOCKET_FOLDER}:rw"],
            "PidsLimit": int(limits.max_pids),
            "Memory": memory,
            "MemorySwap": memory,
            "Ulimits": [{"Name": "core", "Soft": 0, "Hard": 0}],
            "Init": False,  # the template is PID 1 and reaps what it must
            "LogConfig": {"Type": "none", "Config": {}},
            "AutoRemove": False,  # removed by its backend, after its state is read
        },
    }


def _mib(value: float) -> int:
    # Whole bytes: a fractional MiB from the limits must not become a string Docker misreads.
    return max(int(value * MIB), MIB)


def _tmpfs(policy: SandboxPolicy, size_bytes: int, *, mode: str) -> str:
    size = max(int(size_bytes), MIB)
    return f"rw,exec,nosuid,nodev,size={size},uid={policy.uid},gid={policy.uid},mode={mode}"


def session_rlimits(limits: Limits) -> dict[str, tuple[int, int]]:
    """What a session's REPL driver sets on itself in a container (soft, hard).

    The policy's, less RLIMIT_NPROC: without a user namespace it would count every process of
    the sandbox uid on the host, all containers together; pids_limit caps this container's.
    Address space is the backstop only: the container's memory cgroup is the limit.
    """
    return SandboxPolicy.of(limits).rlimits(memory_cgroup=True, nproc=False)


def _canonical_folder(path: str) -> bool:
    return os.path.isabs(path) and os.path.realpath(path) == path and os.path.isdir(path)
