"""Walking and removing folder trees of any shape: iterative, relative to directory fds.

Python 3.11's `os.walk`, `os.fwalk` and `shutil.rmtree` recurse (RecursionError near 1,000
levels) and join full paths (ENAMETOOLONG past PATH_MAX). A run can build both, so every walk
here keeps an explicit stack, opens each folder relative to its parent's fd with O_NOFOLLOW,
and stops at the caps below with TreeTooLarge instead of wandering on.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from executor.errors import ExecutorError

# What a run's copy of the workspace may hold for its change to be considered at all.
MAX_DEPTH = 128  # folders nested in each other
MAX_ENTRIES = 20_000  # files, folders and links together

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a file must not hang the host's open().
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class TreeTooLarge(ExecutorError):
    """A tree broke MAX_DEPTH or MAX_ENTRIES (or could not be read); the message says which."""


@dataclass(frozen=True)
class Found:
    """One entry met by `walk`: valid only while the walk is at it (parent_fd gets closed)."""

    rel: str  # POSIX path relative to the walked root (str with surrogate escapes)
    parent_fd: int
    name: str
    st: os.stat_result  # lstat: links are not followed
    depth: int  # 1 for the root's own children


def walk(
    root: Path, *, max_depth: int | None = None, max_entries: int | None = None
) -> Iterator[Found]:
    """Every entry under `root`, each folder before its contents, links never followed.

    Raises TreeTooLarge on meeting entry number `max_entries + 1` or an entry deeper than
    `max_depth` (defaults: MAX_ENTRIES, MAX_DEPTH). Holds one fd (and one listing) per level.
    """
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    root_fd = os.open(root, DIR_FLAGS)
    stack: list[tuple[int, Iterator[os.DirEntry[str]], str]] = []
    try:
        stack.append((root_fd, os.scandir(root_fd), ""))
        count = 0
        while stack:
            fd, entries, prefix = stack[-1]
            item = next(entries, None)
            if item is None:
                _close_level(stack.pop())
                continue
            depth = len(stack)
            if depth > max_depth:
                raise TreeTooLarge(f"folders are nested more than {max_depth} deep")
            count += 1
            if count > max_entries:
                raise TreeTooLarge(f"it holds more than {max_entries:,} files and folders")
            st = os.stat(item.name, dir_fd=fd, follow_symlinks=False)
            rel = prefix + item.name
            yield Found(rel, fd, item.name, st, depth)
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(item.name, DIR_FLAGS, dir_fd=fd)
                except PermissionError:  # only without root: the run locked us out of it
                    raise TreeTooLarge("a folder in it cannot be read") from None
                try:
                    listing = os.scandir(sub)
                except BaseException:
                    os.close(sub)
                    raise
                stack.append((sub, listing, rel + "/"))
    finally:
        for level in reversed(stack):
            _close_level(level)


def _close_level(level: tuple[int, Iterator[os.DirEntry[str]], str]) -> None:
    fd, entries, _ = level
    close = getattr(entries, "close", None)
    if close is not None:
        close()
    os.close(fd)


def remove_tree(path: Path) -> None:
    """Delete the folder `path` and all it holds, whatever its depth; nothing if missing."""
    try:
        parent = os.open(path.parent, DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        remove_at(parent, path.name)
    finally:
        os.close(parent)


def remove_at(parent_fd: int, name: str) -> None:
    """Delete `name` in the folder `parent_fd` (a file, a link, or a folder and its contents).

    Goes down one folder at a time and back up through "..", so it holds two fds at most and
    no path ever grows; only for host-side trees nothing else is moving (the run is over).
    """
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    fd = _enter(parent_fd, name)
    todo = _clear_files(fd)
    stack: list[tuple[str, list[str]]] = []
    try:
        while True:
            if todo:
                child = todo.pop()
                sub = _enter(fd, child)
                os.close(fd)
                fd = sub
                stack.append((child, todo))
                todo = _clear_files(fd)
            elif stack:
                child, todo = stack.pop()
                up = os.open("..", DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = up
                os.rmdir(child, dir_fd=fd)
            else:
                break
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _enter(parent_fd: int, name: str) -> int:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:  # not root, and the run made its own folder unreadable
        os.chmod(name, 0o700, dir_fd=parent_fd)  # a folder (lstat said so), nothing moving
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o700)  # a read-only folder can still be emptied by its owner
    return fd


def _clear_files(fd: int) -> list[str]:
    """Unlink everything in `fd` that is not a folder; the sub-folders' names."""
    folders: list[str] = []
    with os.scandir(fd) as entries:
        for item in entries:
            if item.is_dir(follow_symlinks=False):
                folders.append(item.name)
            else:
                os.unlink(item.name, dir_fd=fd)
    return folders


@contextlib.contextmanager
def parent_of(root: Path, rel: str) -> Iterator[tuple[int, str]]:
    """An fd of the folder holding `rel` (walked with O_NOFOLLOW from `root`), and its name."""
    parts = rel.split("/")
    fd = os.open(root, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd, parts[-1]
    finally:
        os.close(fd)


def open_regular(parent_fd: int, name: str) -> int:
    """An fd reading the regular file `name`; OSError for a link, FIFO, device or socket."""
    fd = os.open(name, FILE_FLAGS, dir_fd=parent_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{name!r} is not a regular file")
    return fd


def read_regular(root: Path, rel: str, *, limit: int) -> bytes:
    """Up to `limit` bytes of the regular file `rel` under `root`, no link followed."""
    with parent_of(root, rel) as (parent, name):
        fd = open_regular(parent, name)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)
