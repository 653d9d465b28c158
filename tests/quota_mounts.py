"""Quota tmpfs mounts in tests: a program that writes past a 40 MiB quota, whether a path is a
mount point, and teardown of the mounts a test left under its folder (a change left pending).

A pending fs copy lives on a tmpfs mounted in the host's mount namespace; rmtree empties it
but cannot remove a mount point, so a folder's teardown unmounts what is ours under it first.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from executor import quota

# Taken at import, before any test runs: a sabotage that switches the product's unmount off
# (monkeypatching `quota.unmount`) must not switch off the teardown that cleans up after it,
# whichever order pytest undoes the patch and runs the teardown in.
_unmount = quota.unmount


def ours_under(root: Path) -> list[str]:
    """Our quota tmpfs mount points under `root`, deepest first."""
    prefix = str(Path(root).resolve()) + "/"
    with open("/proc/self/mountinfo") as mountinfo:
        points = [
            line.split()[4]
            for line in mountinfo
            if quota.SOURCE in line.split(" - ", 1)[-1].split()[1:2]
        ]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def unmount_under(root: Path) -> None:
    for point in ours_under(root):
        _unmount(Path(point))


def remove_var_dir(root: Path) -> None:
    """A test server's var folder, once its server has ended: the quota tmpfs of its pending
    changes and sessions first (rmtree cannot remove a mount point), then the files (sandboxes
    leave some of other uids, hence ignore_errors)."""
    unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)


# Prints the errno name where the quota stops it, or that it wrote everything.
WRITE_40_MIB = """
import errno
try:
    with open('big', 'wb') as f:
        [f.write(b'\\0' * (1 << 20)) for _ in range(40)]
except OSError as exc:
    print(errno.errorcode[exc.errno], exc.strerror)
else:
    print('wrote it all')
"""


def mounted_anywhere(path: str) -> bool:
    return any(line.split(" ")[4] == path for line in open("/proc/self/mountinfo"))
