"""Apply a change list to the real workspace, never following a link on the way.

Every step goes through directory file descriptors opened with O_NOFOLLOW, so a symlink in the
workspace (planted by an earlier run, or by the person) cannot redirect a write elsewhere.
Files are written to a temporary name and renamed into place, so a crash leaves either the old
or the new file, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from executor.kinds.fs_tree import FsChange, read_file

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def apply_changes(workspace: Path, tree: Path, changes: list[FsChange]) -> None:
    """Make `workspace` match `tree` for every change that was not refused."""
    wanted = [c for c in changes if not c.refused]
    removals = [c for c in wanted if c.action == "deleted" or _kind_changed(workspace, c)]
    for change in sorted(removals, key=lambda c: c.path.count("/"), reverse=True):
        _remove(workspace, change.path)
    for change in sorted(wanted, key=lambda c: (c.path.count("/"), c.path)):
        if change.action != "deleted":
            _put(workspace, tree, change)
    # Folder modes last, deepest first: a read-only folder must not block its own contents.
    dirs = [c for c in wanted if c.kind == "dir" and c.action != "deleted"]
    for change in sorted(dirs, key=lambda c: c.path.count("/"), reverse=True):
        with _parent(workspace, change.path) as (parent, name):
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            try:
                os.fchmod(fd, change.new_mode or 0o755)
            finally:
                os.close(fd)


def _kind_changed(workspace: Path, change: FsChange) -> bool:
    if change.action != "modified":
        return False
    with _parent(workspace, change.path) as (parent, name):
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    current = "symlink" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file"
    return current != change.kind


@contextlib.contextmanager
def _parent(workspace: Path, rel: str) -> Iterator[tuple[int, str]]:
    """An fd of the folder holding `rel` (walked with O_NOFOLLOW) and the last name."""
    parts = rel.split("/")
    fd = os.open(workspace, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd, parts[-1]
    finally:
        os.close(fd)


def _remove(workspace: Path, rel: str) -> None:
    with _parent(workspace, rel) as (parent, name):
        _remove_at(parent, name)


def _remove_at(parent: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return  # already gone with a folder removed before it
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        os.fchmod(fd, 0o700)  # a read-only folder can still be emptied by its owner
        for child in os.listdir(fd):
            _remove_at(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _put(workspace: Path, tree: Path, change: FsChange) -> None:
    with _parent(workspace, change.path) as (parent, name):
        if change.kind == "dir":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)
            return
        temp = f".undoable-{secrets.token_hex(6)}"
        if change.kind == "symlink":
            os.symlink(os.readlink(tree / change.path), temp, dir_fd=parent)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, 0o600, dir_fd=parent)
            with os.fdopen(fd, "wb") as out:
                out.write(read_file(tree / change.path))
                out.flush()
                os.fchmod(out.fileno(), change.new_mode or 0o644)
                os.fsync(out.fileno())
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
