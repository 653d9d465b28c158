"""Quota tmpfs mounts in tests: a program that writes past a 40 MiB quota, whether a path is a
mount point, and teardown of the mounts a test left under its folder (a change left pending).

A pending fs copy lives on a tmpfs mounted in the host's mount namespace; rmtree empties it
but cannot remove a mount point, so a folder's teardown unmounts what is ours under it first.
"""

from __future__ import annotations

from pathlib import Path

from executor import quota


def unmount_under(root: Path) -> None:
    prefix = str(Path(root).resolve()) + "/"
    with open("/proc/self/mountinfo") as mountinfo:
        points = [
            line.split()[4]
            for line in mountinfo
            if quota.SOURCE in line.split(" - ", 1)[-1].split()[1:2]
        ]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        quota.unmount(Path(point))


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
