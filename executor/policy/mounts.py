"""Host folders a run may see: the only bind mounts a sandbox gets besides its root filesystem.

The undoable kinds bind the run's private copy of the workspace over /workspace and a per-run
control folder (unix sockets to host-side relays) at /run/undoable. Nothing else can be
mounted: destinations come from a fixed allowlist and sources must be canonical, existing
folders, so a mount can never reveal more of the host than the folder its caller prepared.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from executor.errors import InvalidSpec

WORKSPACE_DIR = "/workspace"
CONTROL_DIR = "/run/undoable"  # where the per-run control folder appears inside the sandbox
ALLOWED_DESTS = (WORKSPACE_DIR, CONTROL_DIR)


@dataclass(frozen=True)
class Mount:
    """Bind the host folder `host` at `dest` inside the sandbox (read-only unless writable)."""

    host: Path
    dest: str  # WORKSPACE_DIR or CONTROL_DIR: nothing else may be mounted
    writable: bool = False


def check_mounts(mounts: Sequence[Mount]) -> tuple[Mount, ...]:
    """`mounts` as a tuple, or InvalidSpec naming the first one a sandbox must not get."""
    seen: set[str] = set()
    for mount in mounts:
        if mount.dest not in ALLOWED_DESTS:
            raise InvalidSpec(
                f"mount destination {mount.dest!r} is not allowed; use one of {ALLOWED_DESTS}"
            )
        if mount.dest in seen:
            raise InvalidSpec(f"two mounts on {mount.dest!r}")
        seen.add(mount.dest)
        _check_source(str(mount.host))
    return tuple(mounts)


def _check_source(host: str) -> None:
    if not os.path.isabs(host):
        raise InvalidSpec(f"mount source {host!r} is not an absolute path")
    # Canonical only: no "..", no symlink anywhere on the way, so what bwrap binds is exactly
    # the folder the caller named (a swapped-in link cannot redirect it to /etc or /).
    if os.path.realpath(host) != host:
        raise InvalidSpec(f"mount source {host!r} is not canonical (symlink, '..' or '//')")
    if not os.path.isdir(host):
        raise InvalidSpec(f"mount source {host!r} is not an existing folder")


def bwrap_mount_args(mounts: Sequence[Mount]) -> list[str]:
    """The bwrap arguments for `mounts`, checked; they go after the policy's own tmpfs mounts
    (so /workspace covers the scratch tmpfs) and before --remount-ro."""
    args: list[str] = []
    for mount in check_mounts(mounts):
        if mount.dest == CONTROL_DIR:
            args += ["--tmpfs", "/run"]  # the read-only root has no /run/undoable to mount on
        args += ["--bind" if mount.writable else "--ro-bind", str(mount.host), mount.dest]
    return args
