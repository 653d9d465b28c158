"""Host-side access to a session's /workspace, safe against what the sandbox leaves there.

The sandbox can create symlinks (to /etc/shadow, to another session), hard links and fifos in
its workspace, so paths are never resolved by the host kernel in one go: each component is
opened relative to the previous directory fd with O_NOFOLLOW, only regular files are read, and
writes go to a fresh temporary name that is then renamed into place (never through an existing
entry). Paths are validated first: relative, no '..', no NUL.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from executor.errors import InvalidSpec
from executor.spec import validate_relative_path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FileMissing(InvalidSpec):
    """No such file or directory (or not one we will follow)."""


class WorkspaceFull(InvalidSpec):
    """The workspace's quota (bytes or files) has no room for this upload."""


@dataclass(frozen=True)
class FileEntry:
    name: str
    kind: str  # "file", "dir" or "other" (symlinks, fifos: listed, never followed)
    size: int


def _parts(path: str) -> tuple[str, ...]:
    # Relative to /workspace only; an absolute path is refused, not silently re-rooted.
    path = path.rstrip("/") if path != "/" else ""
    return () if path in ("", ".") else validate_relative_path(path).parts


@contextmanager
def _open_dir(
    root: str, parts: tuple[str, ...], *, create: bool = False, owner: int | None = None
) -> Iterator[int]:
    """An fd for root/parts, walking one component at a time without following links."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileMissing(f"no such directory: {'/'.join(parts)}") from None
                os.mkdir(part, 0o755, dir_fd=fd)
                if owner is not None:
                    os.chown(part, owner, owner, dir_fd=fd, follow_symlinks=False)
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:
                raise FileMissing(f"not a directory: {'/'.join(parts)} ({exc.strerror})") from None
            os.close(fd)
            fd = next_fd
        yield fd
    finally:
        os.close(fd)


def read_file(root: str, path: str, *, max_bytes: int) -> bytes:
    parts = _parts(path)
    if not parts:
        raise InvalidSpec("a file path is required")
    with _open_dir(root, parts[:-1]) as dir_fd:
        try:
            fd = os.open(
                parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
            )
        except FileNotFoundError:
            raise FileMissing(f"no such file: {path}") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
                raise FileMissing(f"not a regular file: {path} (a symbolic link)") from None
            raise FileMissing(f"cannot open {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileMissing(f"not a regular file: {path}")
        if info.st_size > max_bytes:
            raise InvalidSpec(f"{path} is larger than {max_bytes} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(max_bytes + 1)[:max_bytes]
    finally:
        os.close(fd)


def write_file(root: str, path: str, data: bytes, *, owner: int | None) -> None:
    """Create or replace root/path atomically; parent directories are created as needed.

    Raises WorkspaceFull, leaving no partial upload behind, when the workspace's quota is used up.
    """
    parts = _parts(path)
    if not parts:
        raise InvalidSpec("a file path is required")
    try:
        _write_file(root, parts, path, data, owner=owner)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise WorkspaceFull(f"no room left in the workspace for {path}") from None


def _write_file(
    root: str, parts: tuple[str, ...], path: str, data: bytes, *, owner: int | None
) -> None:
    with _open_dir(root, parts[:-1], create=True, owner=owner) as dir_fd:
        tmp = f".upload-{uuid.uuid4().hex}"
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=dir_fd,
        )
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(data)
            if owner is not None:
                os.fchown(fd, owner, owner)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        finally:
            os.close(fd)
        try:
            target = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(target.st_mode):
                os.unlink(tmp, dir_fd=dir_fd)
                raise InvalidSpec(f"{path} is a directory")
        except FileNotFoundError:
            pass
        os.rename(tmp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def delete_path(root: str, path: str) -> None:
    """Remove a file, link or whole directory tree (never following links out of it)."""
    parts = _parts(path)
    if not parts:
        raise InvalidSpec("refusing to delete the workspace itself")
    with _open_dir(root, parts[:-1]) as dir_fd:
        try:
            info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise FileMissing(f"no such file: {path}") from None
        if stat.S_ISDIR(info.st_mode):
            # rmtree with dir_fd uses the fd-based, symlink-attack-safe walk.
            shutil.rmtree(parts[-1], dir_fd=dir_fd)
        else:
            os.unlink(parts[-1], dir_fd=dir_fd)


def list_dir(root: str, path: str = "") -> list[FileEntry]:
    entries: list[FileEntry] = []
    with _open_dir(root, _parts(path)) as dir_fd:
        for name in sorted(os.listdir(dir_fd)):
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed by the sandbox while we listed
            kind = "other"
            if stat.S_ISDIR(info.st_mode):
                kind = "dir"
            elif stat.S_ISREG(info.st_mode):
                kind = "file"
            size = info.st_size if kind == "file" else 0
            entries.append(FileEntry(name=name, kind=kind, size=size))
    return entries
