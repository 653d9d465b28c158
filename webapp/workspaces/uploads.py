"""Uploads into a workspace, all or nothing.

1. plan: every entry of every upload is checked before anything is written: names
   (executor.validate_relative_path), no links or special files, no name twice, no path
   that is both a file and a folder, the entry count and the unpacked size;
2. check the plan against the workspace as it is (no-follow): a file where a folder is
   needed, a folder where a file goes, or a link on the way refuses the whole upload;
3. stage: unpack into a private folder in the workspace's state dir (never seen by a sandbox),
   so a corrupt member (bad CRC, bad deflate data) is found before the workspace is touched;
4. install: folders made and files written to temporary names through O_NOFOLLOW directory
   fds; only when every one of them is written are they renamed into place. A failure before
   that removes what was made, so the workspace is exactly as before.

The caller holds the workspace's lock (FsWorkspace.locked) throughout.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from django.core.files.uploadedfile import UploadedFile

from webapp.executor_glue import (
    DIR_FLAGS,
    InvalidSpec,
    kept_mode,
    parent_of,
    remove_tree,
    validate_relative_path,
)

MAX_UPLOAD_BYTES = 64 * 1024 * 1024  # one upload, and everything one request unpacks
# The upload's request body: the files and the form's framing (part headers, boundaries, the
# CSRF field). Past it the request is refused from its head, before a byte is stored.
MAX_UPLOAD_REQUEST_BYTES = MAX_UPLOAD_BYTES + 1024 * 1024
MAX_UPLOAD_ENTRIES = 10_000  # files and folders one request adds
_CHUNK = 1 << 20
# What a damaged archive raises while its directory or a member is read.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError)


@dataclass(frozen=True)
class Entry:
    path: str  # normalised relative POSIX path
    is_dir: bool
    mode: int
    size: int
    open: Callable[[], AbstractContextManager[IO[bytes]]] | None  # None for a folder


def upload_into(root: Path, state_dir: Path, uploads: list[UploadedFile]) -> list[str]:
    """Add `uploads` (a .zip is unpacked) to the workspace at `root`; the files' paths.

    Raises InvalidSpec with a message for the person, having changed nothing."""
    with contextlib.ExitStack() as stack:
        return _write(root, state_dir, _plan(uploads, stack), stack)


def upload_bytes_into(root: Path, state_dir: Path, path: str, data: bytes) -> str:
    """Write `data` as the file `path` (folders made as needed; a .zip is NOT unpacked), all or
    nothing, as upload_into does; the file's normalised path."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise InvalidSpec(f"{path} is larger than {MAX_UPLOAD_BYTES} bytes")
    name = str(validate_relative_path(path))
    entry = Entry(name, False, 0o644, len(data), lambda: contextlib.nullcontext(io.BytesIO(data)))
    with contextlib.ExitStack() as stack:
        [written] = _write(root, state_dir, _complete([entry]), stack)
        return written


def _write(
    root: Path, state_dir: Path, entries: list[Entry], stack: contextlib.ExitStack
) -> list[str]:
    """Check `entries` against the workspace, stage them, install them (steps 2 to 4)."""
    _check_workspace(root, entries)
    staging = Path(tempfile.mkdtemp(prefix="upload-", dir=state_dir))
    stack.callback(remove_tree, staging)
    try:
        _stage(staging, entries)
        _install(root, staging, entries)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InvalidSpec("there is not enough space for this upload") from None
        raise InvalidSpec(f"the upload could not be written: {exc.strerror}") from None
    return [e.path for e in entries if not e.is_dir]


def _plan(uploads: list[UploadedFile], stack: contextlib.ExitStack) -> list[Entry]:
    found: list[Entry] = []
    for upload in uploads:
        name = os.path.basename(upload.name or "") or "upload"
        size = upload.size or 0
        if size > MAX_UPLOAD_BYTES:
            raise InvalidSpec(f"{name} is larger than {MAX_UPLOAD_BYTES} bytes")
        if name.lower().endswith(".zip"):
            found += _zip_entries(name, upload, stack)
        else:
            path = str(validate_relative_path(name))
            found.append(Entry(path, False, 0o644, size, _reader(upload)))
    return _complete(found)


def _reader(upload: UploadedFile) -> Callable[[], AbstractContextManager[IO[bytes]]]:
    def read() -> AbstractContextManager[IO[bytes]]:
        upload.seek(0)
        return contextlib.nullcontext(upload)  # type: ignore[arg-type]  # a File reads bytes

    return read


def _zip_entries(name: str, upload: UploadedFile, stack: contextlib.ExitStack) -> list[Entry]:
    try:
        archive = stack.enter_context(zipfile.ZipFile(upload))  # type: ignore[arg-type]
        infos = archive.infolist()
    except _ZIP_ERRORS:
        raise InvalidSpec(f"{name} is not a valid zip file") from None
    if len(infos) > MAX_UPLOAD_ENTRIES:
        raise InvalidSpec(f"{name} holds more than {MAX_UPLOAD_ENTRIES} entries")
    entries = []
    for info in infos:
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            what = "a link" if kind == stat.S_IFLNK else "not a file or folder"
            raise InvalidSpec(f"{name}: {info.filename} is {what}; links are never unpacked")
        if info.flag_bits & 0x1:
            raise InvalidSpec(f"{name}: {info.filename} is encrypted")
        path = str(validate_relative_path(info.filename))
        if info.is_dir() or kind == stat.S_IFDIR:
            entries.append(Entry(path, True, kept_mode("dir", mode or 0o755), 0, None))
        else:
            opener = _member(archive, info)
            entries.append(Entry(path, False, mode & 0o777 or 0o644, info.file_size, opener))
    return entries


def _member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo
) -> Callable[[], AbstractContextManager[IO[bytes]]]:
    return lambda: archive.open(info)


def _complete(found: list[Entry]) -> list[Entry]:
    """`found` plus the folders its paths imply, shallowest first; refuses clashes and caps."""
    by_path: dict[str, Entry] = {}
    for entry in found:
        parts = entry.path.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            _add(by_path, Entry(folder, True, 0o755, 0, None))
        _add(by_path, entry)
    if len(by_path) > MAX_UPLOAD_ENTRIES:
        raise InvalidSpec(f"the upload holds more than {MAX_UPLOAD_ENTRIES} files and folders")
    if sum(e.size for e in by_path.values()) > MAX_UPLOAD_BYTES:
        raise InvalidSpec(f"the upload unpacks to more than {MAX_UPLOAD_BYTES} bytes")
    return sorted(by_path.values(), key=lambda e: (e.path.count("/"), e.path))


def _add(by_path: dict[str, Entry], entry: Entry) -> None:
    known = by_path.get(entry.path)
    if known is None:
        by_path[entry.path] = entry
    elif known.is_dir != entry.is_dir:
        raise InvalidSpec(f"{entry.path} is both a file and a folder in the upload")
    elif not entry.is_dir:
        raise InvalidSpec(f"{entry.path} appears twice in the upload")


def _check_workspace(root: Path, entries: list[Entry]) -> None:
    """Refuse what cannot be written over: shallowest first, so a parent is reported first."""
    for entry in entries:
        try:
            with parent_of(root, entry.path) as (parent, name):
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue  # made by the upload (a missing parent is one of the entries before)
        except OSError:
            # The parents passed their own check just before: something moved meanwhile.
            raise InvalidSpec(f"{entry.path}: a folder on its path changed; try again") from None
        if entry.is_dir and stat.S_ISLNK(mode):
            raise InvalidSpec(f"{entry.path} is a link in the workspace; nothing is written")
        if entry.is_dir and not stat.S_ISDIR(mode):
            raise InvalidSpec(f"{entry.path} is a file in the workspace, not a folder")
        if not entry.is_dir and stat.S_ISDIR(mode):
            raise InvalidSpec(f"{entry.path} is a folder in the workspace, not a file")


def _stage(staging: Path, entries: list[Entry]) -> None:
    """Unpack every file under `staging` (ours, fresh, private): reading a damaged member fails
    here, before the workspace is touched."""
    for entry in entries:
        target = staging / entry.path
        if entry.is_dir:
            target.mkdir(0o700)
            continue
        assert entry.open is not None
        try:
            with entry.open() as src, open(target, "xb") as out:
                _copy_capped(src, out, entry)
        except _ZIP_ERRORS as exc:
            raise InvalidSpec(f"{entry.path} cannot be unpacked: {exc}") from None


def _copy_capped(src: IO[bytes], out: IO[bytes], entry: Entry) -> None:
    written = 0
    while chunk := src.read(_CHUNK):
        written += len(chunk)
        if written > max(entry.size, 0):
            raise InvalidSpec(f"{entry.path} is larger than its archive says")
        out.write(chunk)


def _install(root: Path, staging: Path, entries: list[Entry]) -> None:
    made: list[str] = []  # folders this upload created, to remove again on failure
    written: list[tuple[str, str]] = []  # (path, temporary name beside it)
    try:
        for entry in entries:
            with parent_of(root, entry.path) as (parent, name):
                if entry.is_dir:
                    if _make_folder(parent, name, entry.mode):
                        made.append(entry.path)
                else:
                    temp = f".undoable-upload-{secrets.token_hex(6)}"
                    written.append((entry.path, temp))
                    _write_temp(staging / entry.path, parent, temp, entry.mode)
    except BaseException:
        _rollback(root, made, written)
        raise
    for path, temp in written:
        with parent_of(root, path) as (parent, name):
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)


def _rollback(root: Path, made: list[str], written: list[tuple[str, str]]) -> None:
    """Remove the temporary files and the folders `_install` made before it failed."""
    for path, temp in reversed(written):
        with contextlib.suppress(OSError), parent_of(root, path) as (parent, _):
            os.unlink(temp, dir_fd=parent)
    for path in reversed(made):
        with contextlib.suppress(OSError), parent_of(root, path) as (parent, name):
            os.rmdir(name, dir_fd=parent)


def _make_folder(parent: int, name: str, mode: int) -> bool:
    """Whether the folder was made now; an existing folder (not a link) is used as it is."""
    try:
        os.mkdir(name, mode, dir_fd=parent)
    except FileExistsError:
        os.close(os.open(name, DIR_FLAGS, dir_fd=parent))  # OSError for a link or a file
        return False
    return True


def _write_temp(source: Path, parent: int, temp: str, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=parent)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, _CHUNK)
        os.fchmod(out.fileno(), kept_mode("file", mode))
