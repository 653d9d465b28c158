"""`undoable do --dir PATH`: a folder of this machine as an fs action's workspace.

The folder is always sent (a server never writes to a path an HTTP caller names): zipped, with
caps on its size and count. On Keep the CLI, not the server, changes the folder, like an
installer: only after checking it has not changed since it was sent; the kept files come from
the workspace's tar through tarfile's `data` filter (PEP 706: no absolute names, nothing
leaving the folder, no links out, no setuid or device files, group/other write cleared);
deletions open each parent without following links. Discard leaves the folder untouched.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from undoable_client.cli.config import UserError

MAX_DIR_BYTES = 64 * 1024 * 1024  # the server's cap on a workspace upload
MAX_DIR_FILES = 10_000
EXTRACT_FILTER: Literal["data", "fully_trusted"] = (
    "data"  # PEP 706; the sabotage test switches it to "fully_trusted"
)


class LocalDirError(UserError):
    """A folder that cannot be sent, or a change that cannot be applied to it."""


def _walk(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `folder` (relative POSIX path, lstat), links never followed."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            path = Path(dirpath, name)
            yield path.relative_to(folder).as_posix(), path.lstat()


def fingerprint(folder: Path) -> str:
    """A hash of the folder's tree: names, kinds, modes and contents."""
    digest = hashlib.sha256()
    for relative, st in _walk(folder):
        digest.update(f"{relative}\0{st.st_mode:o}\0".encode())
        if stat.S_ISREG(st.st_mode):
            digest.update(hashlib.sha256((folder / relative).read_bytes()).digest())
        elif stat.S_ISLNK(st.st_mode):
            digest.update(os.readlink(folder / relative).encode())
    return digest.hexdigest()


def pack(folder: Path) -> bytes:
    """The folder as a zip for the workspace; refused past the caps or with a link in it."""
    if not folder.is_dir():
        raise LocalDirError(f"{folder} is not a folder")
    buffer = io.BytesIO()
    total = count = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for relative, st in _walk(folder):
            count += 1
            if count > MAX_DIR_FILES:
                raise LocalDirError(f"{folder} holds more than {MAX_DIR_FILES} entries")
            if stat.S_ISLNK(st.st_mode):
                raise LocalDirError(f"{relative} is a symbolic link: --dir sends files only")
            if stat.S_ISDIR(st.st_mode) or not stat.S_ISREG(st.st_mode):
                continue
            total += st.st_size
            if total > MAX_DIR_BYTES:
                raise LocalDirError(
                    f"{folder} is larger than {MAX_DIR_BYTES // 2**20} MiB: too large to send"
                )
            info = zipfile.ZipInfo(relative)
            info.external_attr = (st.st_mode & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, (folder / relative).read_bytes())
    return buffer.getvalue()


def _parts(path: str) -> list[str]:
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or any(p in ("..", ".") for p in parts):
        raise LocalDirError(f"refused path {path!r}: outside the folder")
    return list(parts)


def delete_no_follow(folder: Path, path: str) -> None:
    """Delete `path` under `folder`, each parent opened without following a link, so a link in
    the way cannot lead the deletion out of the folder."""
    *parents, name = _parts(path)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parents:
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return  # already gone with its parent
            except OSError as exc:
                raise LocalDirError(f"refused to delete {path}: {part} is not a folder") from exc
            os.close(fd)
            fd = child
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            _rmtree_at(fd, name)
        else:
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _rmtree_at(parent_fd: int, name: str) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        for entry in os.listdir(fd):
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                _rmtree_at(fd, entry)
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def apply_change(folder: Path, tar_bytes: bytes, entries: list[dict[str, Any]]) -> list[str]:
    """Apply a kept fs change: `entries` (the action's change) say what was added, modified
    or deleted; the new files come from `tar_bytes`, the workspace after the Keep."""
    written = [e["path"] for e in entries if e.get("action") in ("added", "modified")]
    deleted = [e["path"] for e in entries if e.get("action") == "deleted"]
    for path in written + deleted:
        _parts(path)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:*") as archive:
        members = {m.name: m for m in archive.getmembers()}
        chosen = []
        for path in written:
            member = members.get(path)
            if member is None:
                raise LocalDirError(f"the server's archive lacks {path}")
            chosen.append(member)
        for member in chosen:
            if not member.isdir():
                # Replace, never write through: a link at the destination is removed first.
                delete_no_follow(folder, member.name)
        archive.extractall(folder, members=chosen, filter=EXTRACT_FILTER)  # noqa: S202 (PEP 706)
    for path in sorted(deleted, key=lambda p: p.count("/"), reverse=True):
        delete_no_follow(folder, path)
    return written + deleted


class LocalFolder:
    """A folder sent as a workspace, and kept back into on Keep."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.sent = ""

    def send(self, client: Any) -> int:
        """A new workspace holding the folder's files; its id."""
        data = pack(self.folder)
        self.sent = fingerprint(self.folder)
        workspace = client.workspace()
        workspace.upload_zip(data)
        return int(workspace.id)

    def unchanged(self) -> bool:
        return fingerprint(self.folder) == self.sent

    def keep(self, action: Any) -> list[str]:
        """Keep the action, then apply its change here; refused (and the change discarded)
        when the folder changed since it was sent, so nothing of either is lost."""
        if not self.unchanged():
            action.discard()
            raise LocalDirError(
                f"{self.folder} changed since it was sent: the change was discarded and the "
                "folder left as it is; run the command again"
            )
        entries = list((action.change or {}).get("entries") or [])
        action.keep()
        tar_bytes = action.client.request("GET", f"/workspaces/{int(action.workspace)}/tar")
        return apply_change(self.folder, tar_bytes, entries)
