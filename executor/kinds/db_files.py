"""Moving a SQLite database between the workspace and the host's private copy, no-follow.

The workspace's files were written by earlier runs, so any folder on the way may be a link
planted to redirect us. Every step opens the next folder relative to the previous one's fd
with O_NOFOLLOW; the file itself is opened O_NOFOLLOW and must be a regular file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from executor.kinds.errors import TransactionError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SIDECARS = ("-wal", "-shm", "-journal")
DATABASE_MODE = 0o644


@contextlib.contextmanager
def _parent(root: Path, rel: str, *, create: bool) -> Iterator[tuple[int, str]]:
    *folders, name = rel.split("/")
    fd = os.open(root, _DIR)
    try:
        for part in folders:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                next_fd = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                raise TransactionError(
                    f"the database path {rel!r} goes through something that is not a folder"
                ) from exc
            os.close(fd)
            fd = next_fd
        yield fd, name
    finally:
        os.close(fd)


def copy_database_out(root: Path, rel: str, dest: Path) -> None:
    """Copy the workspace's database (and a WAL beside it) to `dest`; nothing if missing."""
    try:
        with _parent(root, rel, create=False) as (parent, name):
            for suffix in ("", "-wal"):
                _copy_regular(parent, name + suffix, Path(f"{dest}{suffix}"), required=not suffix)
    except TransactionError:
        if not os.path.lexists(root / rel):
            return
        raise


def _copy_regular(parent: int, name: str, dest: Path, *, required: bool) -> None:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent
        )
    except FileNotFoundError:
        return
    except OSError as exc:  # ELOOP: a link
        raise TransactionError(f"{name} is not a regular file") from exc
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            if required:
                raise TransactionError(f"{name} is not a regular file")
            return
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(out, "wb") as dst:
            shutil.copyfileobj(src, dst)


def install_database(root: Path, rel: str, copy: Path, *, owner_uid: int | None) -> None:
    """Put the committed `copy` at `rel` in the workspace, atomically; drop stale journals."""
    with _parent(root, rel, create=True) as (parent, name):
        temp = f".undoable-{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out, open(copy, "rb") as src:
                shutil.copyfileobj(src, out)
                out.flush()
            os.fchmod(fd, DATABASE_MODE)
            if owner_uid is not None and os.geteuid() == 0:
                os.fchown(fd, owner_uid, owner_uid)
            os.fsync(fd)
        finally:
            os.close(fd)
        for suffix in _SIDECARS:  # a journal of the old file would corrupt the new one
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name + suffix, dir_fd=parent)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
