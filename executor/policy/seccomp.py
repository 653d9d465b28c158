"""The seccomp filter every bwrap sandbox runs under, compiled once to BPF with libseccomp.

Default allow, with a deny list of the syscalls that widen the kernel attack surface or reach
outside the sandbox (the same families Docker's and Flatpak's profiles refuse). Denied calls
fail with EPERM rather than killing the process, so a program gets an ordinary error it can
print. Syscalls from a foreign ABI (32-bit int 0x80, x32) kill the process: the filter only
knows the native ABI, and an unknown ABI must not slip past it.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from typing import Any

from executor.errors import BackendUnavailable

# Tracing and reading other processes' memory.
_DEBUG = ("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp")
# Kernel keyrings are not namespaced: a key added here would be visible to the host user.
_KEYRING = ("keyctl", "add_key", "request_key")
# Large, frequently exploited kernel interfaces a sandboxed script has no use for.
_KERNEL_SURFACE = (
    "bpf",
    "userfaultfd",
    "perf_event_open",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "lookup_dcookie",
    "uselib",
    "personality",
    "vhangup",
    "fanotify_init",
    "open_by_handle_at",
    "name_to_handle_at",
)
# Namespaces and the mount table: the sandbox's walls.
_NAMESPACES = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
)
# The machine itself: modules, kexec, clocks, swap, accounting, reboot, raw I/O ports.
_MACHINE = (
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "iopl",
    "ioperm",
    "quotactl",
    "quotactl_fd",
)

DENIED_SYSCALLS: tuple[str, ...] = _DEBUG + _KEYRING + _KERNEL_SURFACE + _NAMESPACES + _MACHINE

# ioctl requests that push input into a terminal or console (a classic sandbox escape).
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
DENIED_IOCTLS: tuple[int, ...] = (TIOCSTI, TIOCLINUX)

# clone3 takes its flags in a struct seccomp cannot inspect; ENOSYS makes libc fall back to
# clone(2), whose flags the namespace rules above already constrain via --disable-userns.
ENOSYS_SYSCALLS: tuple[str, ...] = ("clone3",)


# What the zygote's template (executor/policy/zygote_child.py) needs beyond a sandbox: each
# run's first process, cloned into its namespaces, mounts its scratch space and `/proc` and
# unshares its cgroup namespace. The template never runs user code, and every run loads the full
# filter above on top of this one before the program starts.
ZYGOTE_ALLOWED: tuple[str, ...] = ("unshare", "mount")


def _native(names: tuple[str, ...]) -> list[str]:
    """The calls of `names` this architecture has (iopl is not on arm64: nothing to deny)."""
    import pyseccomp as seccomp

    native = seccomp.system_arch()
    return [name for name in names if seccomp.resolve_syscall(native, name) >= 0]


def _denied(zygote: bool) -> list[str]:
    allowed = ZYGOTE_ALLOWED if zygote else ()
    return _native(tuple(name for name in DENIED_SYSCALLS if name not in allowed))


def build_filter(*, zygote: bool = False):  # type: ignore[no-untyped-def]
    """The libseccomp filter object (pyseccomp.SyscallFilter) for the policy above; with
    `zygote`, the template's variant (ZYGOTE_ALLOWED left out of the deny list)."""
    import pyseccomp as seccomp

    filt = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in _denied(zygote):
        filt.add_rule(seccomp.ERRNO(errno.EPERM), name)
    for name in _native(ENOSYS_SYSCALLS):
        filt.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
    for request in DENIED_IOCTLS:
        # Compare the low 32 bits only: the kernel truncates the request to an int.
        arg = seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request)
        filt.add_rule(seccomp.ERRNO(errno.EPERM), "ioctl", arg)
    return filt


def docker_profile(*, zygote: bool = False) -> dict[str, Any]:
    """The same policy as a Docker seccomp profile (the JSON `security_opt: seccomp=` takes).

    For the container the Docker backend hosts the zygote's template in
    (backends/docker/template.py): Docker's default profile refuses the namespaces and mounts
    every run is made with. The template loads `seccomp_bpf(zygote=True)` itself as well.
    """
    masked_eq = "SCMP_CMP_MASKED_EQ"  # (argument & value) == valueTwo
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": _denied(zygote), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
            {
                "names": _native(ENOSYS_SYSCALLS),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.ENOSYS,
            },
            *(
                {
                    "names": ["ioctl"],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.EPERM,
                    "args": [
                        {"index": 1, "value": 0xFFFFFFFF, "valueTwo": request, "op": masked_eq}
                    ],
                }
                for request in DENIED_IOCTLS
            ),
        ],
    }


@functools.cache
def seccomp_bpf(*, zygote: bool = False) -> bytes:
    """The compiled BPF program bwrap loads with `--seccomp FD` (with `zygote`, the template's
    variant, see build_filter). Raises BackendUnavailable."""
    try:
        filt = build_filter(zygote=zygote)
        with tempfile.TemporaryFile() as out:
            filt.export_bpf(out)
            out.seek(0)
            program = out.read()
    except (ImportError, OSError, RuntimeError) as exc:
        raise BackendUnavailable(f"seccomp is unavailable (pyseccomp/libseccomp2): {exc}") from exc
    if not program or len(program) % 8:
        raise BackendUnavailable("libseccomp produced an empty or malformed BPF program")
    return program


def seccomp_pipe(*, zygote: bool = False) -> int:
    """A pipe read end holding the BPF program, ready to hand to bwrap (`--seccomp FD`)."""
    program = seccomp_bpf(zygote=zygote)
    read_end, write_end = os.pipe()
    try:
        # A few KiB: far below the pipe buffer, so the write never blocks.
        os.write(write_end, program)
    finally:
        os.close(write_end)
    return read_end
