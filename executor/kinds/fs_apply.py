"""Apply a change list to the real workspace like a package installer, not like `cp -a`.

Every step goes through directory file descriptors opened with O_NOFOLLOW, so a symlink in the
workspace (planted by an earlier run, or by the person) cannot redirect a write elsewhere.
Only regular files, folders and (already vetted) links are written; modes are masked
(fs_tree.kept_mode: no setuid/setgid/sticky, nothing group/world-writable); what is written
belongs to `owner_uid`, not root; a hardlink in the copy arrives as a file of its own. Files
are written to a temporary name and renamed into place, so a crash leaves either the old or
the new file, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path

from executor.kinds import fs_tree
from executor.kinds.fs_tree import FsChange
from executor.kinds.fs_walk import DIR_FLAGS, open_regular, parent_of, remove_at

_CHUNK = 1 << 20


def apply_changes(
    workspace: Path, tree: Path, changes: list[FsChange], *, owner_uid: int | None = None
) -> None:
    """Make `workspace` match `tree` for every change that was not refused.

    `owner_uid` (and the same gid) owns every file, folder and link written; ignored unless
    this process runs as root (an unprivileged host can only write its own files anyway).
    """
    owner = effective_owner(owner_uid)
    wanted = [c for c in changes if not c.refused]
    removals = [c for c in wanted if c.action == "deleted" or _kind_changed(workspace, c)]
    for change in sorted(removals, key=lambda c: c.path.count("/"), reverse=True):
        with parent_of(workspace, change.path) as (parent, name):
            remove_at(parent, name)
    for change in sorted(wanted, key=lambda c: (c.path.count("/"), c.path)):
        if change.action != "deleted":
            _put(workspace, tree, change, owner)
    # Folder modes last, deepest first: a read-only folder must not block its own contents.
    dirs = [c for c in wanted if c.kind == "dir" and c.action != "deleted"]
    for change in sorted(dirs, key=lambda c: c.path.count("/"), reverse=True):
        with parent_of(workspace, change.path) as (parent, name):
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            try:
                _settle(fd, "dir", change.new_mode, owner)
            finally:
                os.close(fd)


def effective_owner(owner_uid: int | None) -> int | None:
    """Whom Keep gives what it writes: `owner_uid` when we can (root), else leave it be."""
    return owner_uid if owner_uid is not None and os.geteuid() == 0 else None


def _settle(fd: int, kind: str, mode: int | None, owner: int | None) -> None:
    """Masked mode and the dedicated owner for what `fd` refers to."""
    if owner is not None:
        os.fchown(fd, owner, owner)
    # chown clears setuid/setgid, so the mode goes after it (and is masked regardless).
    os.fchmod(fd, fs_tree.kept_mode("dir" if kind == "dir" else "file", mode or 0o644))


def _kind_changed(workspace: Path, change: FsChange) -> bool:
    if change.action != "modified":
        return False
    with parent_of(workspace, change.path) as (parent, name):
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    current = "symlink" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file"
    return current != change.kind


def _put(workspace: Path, tree: Path, change: FsChange, owner: int | None) -> None:
    if change.kind not in ("dir", "file", "symlink"):
        raise OSError(f"refusing to write {change.kind} {change.path!r}")  # refused upstream
    with contextlib.ExitStack() as stack:
        parent, name = stack.enter_context(parent_of(workspace, change.path))
        source_parent, _ = stack.enter_context(parent_of(tree, change.path))
        if change.kind == "dir":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)
            return
        temp = f".undoable-{secrets.token_hex(6)}"
        if change.kind == "symlink":
            target = os.readlink(name, dir_fd=source_parent)
            if target != change.target:
                raise OSError(f"the link {change.path!r} changed after it was checked")
            os.symlink(target, temp, dir_fd=parent)
            if owner is not None:
                os.chown(temp, owner, owner, dir_fd=parent, follow_symlinks=False)
        else:
            _write_file(source_parent, name, parent, temp, change, owner)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)


def _write_file(
    source_parent: int, name: str, parent: int, temp: str, change: FsChange, owner: int | None
) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with (
        os.fdopen(open_regular(source_parent, name), "rb") as src,
        os.fdopen(os.open(temp, flags, 0o600, dir_fd=parent), "wb") as out,
    ):
        shutil.copyfileobj(src, out, _CHUNK)
        out.flush()
        _settle(out.fileno(), "file", change.new_mode, owner)
        os.fsync(out.fileno())
