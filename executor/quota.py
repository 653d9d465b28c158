"""Real disk quotas for host folders a sandbox writes into: a size- and inode-capped tmpfs.

A host folder bound into a sandbox is only bounded by the host's free space; RLIMIT_FSIZE caps
one file, not how many. Mounting a tmpfs with `size=` and `nr_inodes=` on the folder lets the
kernel refuse the write past the cap (ENOSPC), whatever the program does. Mounting needs
CAP_SYS_ADMIN over our mount namespace; where we lack it `mount_tmpfs` says so by returning
False and the caller falls back to what it had.

mount(2) and umount2(2) are called through libc: no `mount` binary needed, no fork per call.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
import tempfile
from pathlib import Path

from executor.errors import ExecutorError

MS_NOSUID = 0x2
MS_NODEV = 0x4
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8
MOUNTINFO = "/proc/self/mountinfo"
SOURCE = "undoable-quota"  # the mount's source name: how we tell our tmpfs from anyone else's

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class QuotaError(ExecutorError):
    """A quota mount could not be made or removed for reasons other than missing privilege."""


def _open_dir_nofollow(path: Path) -> int:
    """An O_PATH descriptor of the folder itself; refuses a symlink (or anything else) there."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise QuotaError(f"cannot open {path} for a quota mount: {exc}") from exc
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise QuotaError(f"{path} is not a folder (a symlink or other file is refused)")
    return fd


def mount_tmpfs(
    path: Path,
    *,
    size_bytes: int,
    max_inodes: int,
    uid: int | None = None,
    gid: int | None = None,
    mode: int = 0o711,
) -> bool:
    """Mount a tmpfs capped at `size_bytes` and `max_inodes` on the existing empty folder `path`.

    The mount is nosuid,nodev (exec stays allowed: a sandbox may run scripts it wrote); its root
    gets `mode` and, when given, `uid`/`gid`. A symlink at `path` is refused, and the mount is
    made through a no-follow descriptor so the folder cannot be swapped for one in between.

    Returns False, mounting nothing, when this process may not mount (EPERM: not root, no
    CAP_SYS_ADMIN over its mount namespace, or a seccomp filter). Raises QuotaError (an
    ExecutorError) on any other failure: bad sizes, a missing, non-empty or already-mounted
    folder, a symlink at `path`.
    """
    if size_bytes <= 0 or max_inodes <= 0:
        raise QuotaError(
            f"a quota needs positive caps, got {size_bytes} bytes, {max_inodes} inodes"
        )
    fd = _open_dir_nofollow(path)
    try:
        if is_mounted(path):
            raise QuotaError(f"{path} already has a tmpfs mounted on it")
        if os.listdir(f"/proc/self/fd/{fd}"):
            raise QuotaError(f"{path} is not empty; a quota mount would hide its files")
        options = [f"size={size_bytes}", f"nr_inodes={max_inodes}", f"mode={mode:o}"]
        if uid is not None:
            options.append(f"uid={uid}")
        if gid is not None:
            options.append(f"gid={gid}")
        result = _libc.mount(
            SOURCE.encode(),
            f"/proc/self/fd/{fd}".encode(),
            b"tmpfs",
            MS_NOSUID | MS_NODEV,
            ",".join(options).encode(),
        )
        if result != 0:
            err = ctypes.get_errno()
            if err == errno.EPERM:
                return False
            raise QuotaError(f"cannot mount a tmpfs on {path}: {os.strerror(err)}")
        return True
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _ours_on_top(mount_point: str) -> bool:
    """Whether the topmost mount at `mount_point` is a quota tmpfs of ours (per mountinfo)."""
    top = None
    with open(MOUNTINFO) as lines:
        for line in lines:
            before, _, after = line.partition(" - ")
            fields = before.split(" ")
            if len(fields) >= 5 and _unescape(fields[4]) == mount_point:
                top = after.split(" ")[:2]
    return top == ["tmpfs", SOURCE]


def _resolved(path: Path) -> str | None:
    """`path` with its parent resolved but its last component not followed; None for a symlink."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return None
    except FileNotFoundError:
        return None
    absolute = Path(os.path.abspath(path))
    return str(Path(os.path.realpath(absolute.parent)) / absolute.name)


def is_mounted(path: Path) -> bool:
    """Whether a quota tmpfs of ours is mounted right at `path` (never follows a symlink there)."""
    mount_point = _resolved(path)
    if mount_point is None:
        return False
    return _ours_on_top(mount_point)


def unmount(path: Path) -> None:
    """Lazily detach our quota tmpfs at `path`; a no-op when there is none (or a symlink).

    MNT_DETACH: a sandbox still holding the folder open keeps its view until it exits, and the
    folder is back to the empty one underneath at once. UMOUNT_NOFOLLOW: never a symlink's target.
    """
    mount_point = _resolved(path)
    if mount_point is None:
        return
    while _ours_on_top(mount_point):
        if _libc.umount2(mount_point.encode(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0:
            err = ctypes.get_errno()
            raise QuotaError(f"cannot unmount the tmpfs on {path}: {os.strerror(err)}")


@functools.cache
def supported() -> bool:
    """Whether `mount_tmpfs` can work in this process (probed once with a real mount)."""
    probe = Path(tempfile.mkdtemp(prefix="undoable-quota-probe-"))
    try:
        mounted = mount_tmpfs(probe, size_bytes=1 << 16, max_inodes=16)
        if mounted:
            unmount(probe)
        return mounted
    except QuotaError:
        return False
    finally:
        os.rmdir(probe)
