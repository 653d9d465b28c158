"""The sandbox policy rendered for bwrap: its command line, as pure functions.

What a sandboxed program may see or do is decided in policy/sandbox_policy.py; this module
turns a SandboxPolicy into bwrap's options and puts the launcher in front
(tests/executor/policy/test_bwrap_policy.py).
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from executor.errors import InvalidLimits, InvalidSpec
from executor.images import ImageCaps
from executor.limits import Limits
from executor.policy import wire
from executor.policy.mounts import bwrap_mount_args
from executor.policy.sandbox_policy import WORKDIR, SandboxPolicy, program_env

# What the supervisor proposes of the output folder at most; the host decides (executor/images.py).
IMAGE_CAPS = ImageCaps()
# Extra seconds the launcher allows past the hard limit; our own kill comes first.
HARD_KILL_GRACE_S = 5
# The host-side launcher of every sandbox, compiled in place by `make launcher`.
LAUNCHER = str(Path(__file__).resolve().parents[1] / "launcher" / "undoable-launch")


@dataclass(frozen=True)
class SandboxFds:
    """Host file descriptors inherited by bwrap (same numbers inside the sandbox)."""

    seccomp: int  # read end holding the BPF program; bwrap reads and closes it
    job: int  # read end: the driver's own code (driver_payload), then its one job
    status: int  # write end: the driver reports "ready" and the program's wait status


@cache
def driver_source() -> str:
    """The in-sandbox supervisor's source (executor/policy/supervisor.py): stateless runs and
    session cells alike."""
    return wire.supervisor_source()


# What python3 -c runs in the sandbox: read the supervisor from the job fd and run it. The
# supervisor travels as a code object when the sandbox's Python can load ours, because
# compiling its source cost every single-use sandbox ~2 ms of CPU. EOF before it arrives
# means the host discarded the sandbox: exit 125 as the supervisor would.
_BOOTSTRAP = """import marshal, os
def _read(size, data=b""):
    while len(data) < size:
        part = os.read({fd}, size - len(data))
        if not part:
            os._exit(125)
        data += part
    return data
_head = _read(5)
_driver = _read(int.from_bytes(_head[1:], "big"))
exec(marshal.loads(_driver) if _head[:1] == b"M" else _driver.decode())
"""


@cache
def driver_payload(rootfs: str) -> bytes:
    """What the host writes on a new sandbox's job fd first: the supervisor, in one frame of
    executor/policy/wire.py.

    Kind b"M": the code object, marshalled, when the rootfs's Python has our bytecode magic
    number (same minor version); else b"S": the source, compiled in the sandbox.
    """
    source = driver_source()
    if _rootfs_bytecode_magic(rootfs) == importlib.util.MAGIC_NUMBER:
        return wire.frame(b"M", marshal.dumps(compile(source, "<string>", "exec")))
    return wire.frame(b"S", source.encode())


def _rootfs_bytecode_magic(rootfs: str) -> bytes:
    """The magic number of the rootfs's own compiled `os` module for our Python version."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    cache_tag = sys.implementation.cache_tag
    pyc = Path(rootfs, f"usr/lib/python{version}/__pycache__/os.{cache_tag}.pyc")
    try:
        with pyc.open("rb") as compiled:
            return compiled.read(4)
    except OSError:
        return b""


def bwrap_argv(
    policy: SandboxPolicy,
    *,
    rootfs: str,
    fds: SandboxFds,
    command: Sequence[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    as_pid_1: bool = True,
    disable_userns: bool = True,
) -> list[str]:
    """`policy` rendered as bwrap around the in-sandbox program (launch_argv puts the launcher
    in front).

    The policy's mounts (checked by executor/policy/mounts.py) are bound over the scratch
    tmpfs, before everything is remounted read-only; its workspace, when a session has one, is
    bound read-write as /workspace instead of the private tmpfs, so the host can put and fetch
    files.

    What a long-lived session changes besides (executor/backends/bwrap/session.py):
    `command`: the in-sandbox program (absolute path first) instead of the one-shot driver.
    `extra_env`: variables set after the policy's BASE_ENV, for the program only.
    `as_pid_1`: False lets bwrap's own init be PID 1 and reap the orphans the program leaves.
    `disable_userns`: False only for the zygote's template (executor/policy/zygote_child.py),
        which unshares each run's namespaces and forbids further ones inside them itself.
    """
    policy.check_network("bwrap")
    if not os.path.isabs(rootfs):
        raise InvalidLimits(f"rootfs must be an absolute path, not {rootfs!r}")
    program = _driver_command(fds) if command is None else _checked_command(command)
    env = program_env(_checked_env(extra_env or {}))
    policy.check_mounts()
    own = policy.workspace_mounts
    # Private, size-capped scratch space unless a host folder is bound there (checked like
    # any mount: absolute, canonical, an existing folder). Nothing else from the host is writable.
    workdir = (
        bwrap_mount_args(own)
        if own
        else ["--size", str(policy.workdir_bytes), "--perms", "0700", "--tmpfs", WORKDIR]
    )
    return [
        "bwrap",
        # Fresh user, pid, net, ipc, uts and cgroup namespaces; no nested user namespaces.
        "--unshare-all",
        "--unshare-user",
        *(["--disable-userns"] if disable_userns else []),
        "--new-session",
        "--die-with-parent",
        *(["--as-pid-1"] if as_pid_1 else []),
        "--uid",
        str(policy.uid),
        "--gid",
        str(policy.uid),
        "--hostname",
        policy.hostname,
        # The root filesystem, read-only; only the sandbox's own /proc and a minimal /dev.
        "--ro-bind",
        rootfs,
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(policy.dev_shm_bytes),
        "--tmpfs",
        "/dev/shm",
        *workdir,
        "--size",
        str(policy.tmp_bytes),
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        *bwrap_mount_args(policy.mounts),
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
        # bwrap itself starts with an empty environment; these reach the program only.
        *_setenv(env),
        # Everything after "--" is the program's argv, never a bwrap option.
        "--",
        *program,
    ]


def launch_argv(
    argv: Sequence[str], *, cgroup_procs: Sequence[str], host_uid: int | None, hard_limit_s: float
) -> list[str]:
    """`argv` (the bwrap command) behind the launcher, executor/launcher/undoable-launch.c.

    The launcher first writes itself into each of the sandbox's `cgroup.procs` files, still as
    the calling user, so nothing the sandbox starts escapes them; then drops to `host_uid` with
    no supplementary groups and no capabilities; then SIGKILLs bwrap once `hard_limit_s` (plus
    a grace our own kill comes before) has passed, even if the calling process is wedged (if it
    dies, --die-with-parent fires). Being one small exec, not a shell plus `setpriv` plus
    `timeout`, saves ~3 ms of CPU per sandbox; it also keeps `subprocess` on its vfork path,
    where asking Popen itself to switch user would fork() the whole threaded server.
    """
    command = [LAUNCHER]
    for procs in cgroup_procs:
        command += ["--cgroup-procs", procs]
    if host_uid is not None:
        command += ["--uid", str(int(host_uid))]
    return [*command, "--kill-after", str(int(hard_limit_s + HARD_KILL_GRACE_S)), "--", *argv]


def _driver_command(fds: SandboxFds) -> list[str]:
    bootstrap = _BOOTSTRAP.format(fd=int(fds.job))
    caps = [str(IMAGE_CAPS.max_count), str(IMAGE_CAPS.max_image_bytes)]
    return ["/usr/bin/python3", "-I", "-c", bootstrap, str(fds.job), str(fds.status), *caps]


def _checked_command(command: Sequence[str]) -> list[str]:
    if isinstance(command, str) or not command or not os.path.isabs(command[0]):
        raise InvalidSpec(f"the sandbox command needs an absolute program first: {command!r}")
    return list(command)


def _checked_env(env: Mapping[str, str]) -> Mapping[str, str]:
    for key in env:
        if not key or "=" in key or "\0" in key:
            raise InvalidSpec(f"bad environment variable name {key!r}")
    return env


def _setenv(env: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def rlimit_names_known() -> bool:
    """True when this Python knows every rlimit the policy sets (self-check)."""
    rlimits = SandboxPolicy.of(Limits()).rlimits(memory_cgroup=False)
    return all(hasattr(resource, name) for name in rlimits)
