"""Read-only views of a folder tree: scan it, copy it, and list how two trees differ.

Symbolic links are never followed: a link is an entry of its own (its target text), so a
hostile link cannot make us read or copy anything outside the tree. Walks are iterative and
capped (executor.kinds.fs_walk), so no tree shape can exhaust the host's stack or paths.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from executor.kinds.fs_links import escaping_links
from executor.kinds.fs_walk import DIR_FLAGS, TreeTooLarge, open_regular, walk

EntryKind = Literal["file", "dir", "symlink", "other"]
Action = Literal["added", "modified", "deleted"]
_CHUNK = 1 << 20

__all__ = [
    "Entry",
    "FsChange",
    "TreeTooLarge",
    "copy_tree",
    "diff_trees",
    "kept_mode",
    "scan",
    "state_digest",
]


@dataclass(frozen=True)
class Entry:
    kind: EntryKind
    mode: int  # permission bits only (S_IMODE)
    size: int
    digest: str = ""  # sha256 of a file's bytes
    target: str = ""  # a symlink's target text


@dataclass(frozen=True)
class FsChange:
    """One path that differs between the workspace and the run's copy of it."""

    path: str  # may hold surrogate escapes (a non-UTF-8 name): as_dict() escapes them
    action: Action
    kind: EntryKind  # the entry after the run (before it, for a deletion)
    old_mode: int | None
    new_mode: int | None  # the mode Keep gives it (masked), not the one the run asked for
    size: int
    binary: bool = False
    diff: str = ""  # unified diff for text files (filled in for listed changes only)
    refused: str = ""  # non-empty: Keep leaves this path alone, and this says why
    target: str = ""  # a link's target
    note: str = ""  # e.g. the mode the run asked for, when Keep masks it

    def as_dict(self) -> dict[str, object]:
        """JSON- and HTML-safe: no lone surrogates, non-UTF-8 bytes shown as \\xNN."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, str):
                data[key] = safe_text(value)
        data["old_mode"] = None if self.old_mode is None else f"{self.old_mode:04o}"
        data["new_mode"] = None if self.new_mode is None else f"{self.new_mode:04o}"
        return data


def safe_text(text: str) -> str:
    """`text` with surrogate escapes (undecodable bytes of a name) written as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def kept_mode(kind: EntryKind, mode: int) -> int:
    """The permission bits Keep gives an entry: no setuid/setgid/sticky, no group or other
    write; the owner can always read and write it (and enter a folder); exec bits may stay."""
    return (mode & 0o755) | (0o700 if kind == "dir" else 0o600)


def scan(root: Path) -> dict[str, Entry]:
    """Every entry under `root` (not `root` itself) by relative POSIX path, links unfollowed.

    Raises TreeTooLarge past fs_walk.MAX_DEPTH / MAX_ENTRIES.
    """
    entries: dict[str, Entry] = {}
    for found in walk(root):
        st = found.st
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(found.name, dir_fd=found.parent_fd)
            entries[found.rel] = Entry("symlink", mode, 0, target=target)
        elif stat.S_ISDIR(st.st_mode):
            entries[found.rel] = Entry("dir", mode, 0)
        elif stat.S_ISREG(st.st_mode):
            digest = _digest(found.parent_fd, found.name)
            entries[found.rel] = Entry("file", mode, st.st_size, digest=digest)
        else:  # FIFOs, sockets, device nodes: never copied, never applied
            entries[found.rel] = Entry("other", mode, 0)
    return entries


def _digest(parent_fd: int, name: str) -> str:
    h = hashlib.sha256()
    with os.fdopen(open_regular(parent_fd, name), "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def state_digest(entries: dict[str, Entry]) -> str:
    """One hash of a scanned tree: every path with its type, mode, size, content hash and link
    target (what a rehearsal and a verified undo compare)."""
    h = hashlib.sha256()
    for rel in sorted(entries):
        e = entries[rel]
        h.update(json.dumps([safe_text(rel), e.kind, e.mode, e.size, e.digest, e.target]).encode())
        h.update(b"\n")
    return h.hexdigest()


def copy_tree(src: Path, dst: Path, *, uid: int | None = None, gid: int | None = None) -> None:
    """Copy `src` into the new folder `dst` exactly: bytes, modes, mtimes, dot-files, links.

    A full copy, not hard links or reflinks: the sandbox writes the copy, and a shared inode
    would let it change the original. `uid`/`gid` make the copy the sandbox user's own.
    Special files are left out. Raises TreeTooLarge past the walk's caps.
    """
    gid = uid if gid is None else gid
    os.mkdir(dst, 0o700)
    # One open folder per level of `dst`, paired with the mode it gets once it is filled.
    levels: list[tuple[int, int]] = [(os.open(dst, DIR_FLAGS), stat.S_IMODE(os.stat(src).st_mode))]
    try:
        for found in walk(src):
            while len(levels) > found.depth:
                _close_dir(levels.pop(), uid, gid)
            parent = levels[-1][0]
            st, name = found.st, found.name
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(name, 0o700, dir_fd=parent)
                levels.append((os.open(name, DIR_FLAGS, dir_fd=parent), stat.S_IMODE(st.st_mode)))
            elif stat.S_ISREG(st.st_mode):
                _copy_file(found.parent_fd, parent, name, st, uid, gid)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=found.parent_fd), name, dir_fd=parent)
                if uid is not None:
                    os.chown(
                        name,
                        uid,
                        gid if gid is not None else uid,
                        dir_fd=parent,
                        follow_symlinks=False,
                    )
    finally:
        while levels:
            _close_dir(levels.pop(), uid, gid)


def _close_dir(level: tuple[int, int], uid: int | None, gid: int | None) -> None:
    fd, mode = level
    try:
        # Modes once a folder is filled, so a read-only folder does not block its own copy.
        os.fchmod(fd, mode)
        if uid is not None:
            os.fchown(fd, uid, gid if gid is not None else uid)
    finally:
        os.close(fd)


def _copy_file(
    src_parent: int,
    dst_parent: int,
    name: str,
    st: os.stat_result,
    uid: int | None,
    gid: int | None,
) -> None:
    with os.fdopen(open_regular(src_parent, name), "rb") as src:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(name, flags, 0o600, dir_fd=dst_parent), "wb") as out:
            shutil.copyfileobj(src, out, _CHUNK)
            out.flush()
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
            os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
            if uid is not None:
                os.fchown(out.fileno(), uid, gid if gid is not None else uid)


def diff_trees(before_root: Path, after_root: Path) -> list[FsChange]:
    """What changed from `before_root` to `after_root`, sorted by path, without text diffs
    (fs_listing adds those for the changes a person is shown).

    Raises TreeTooLarge when either tree breaks the walk's caps.
    """
    return diff_entries(scan(before_root), scan(after_root))


def diff_entries(before: dict[str, Entry], after: dict[str, Entry]) -> list[FsChange]:
    changed = sorted(
        rel for rel in before.keys() | after.keys() if _differs(before.get(rel), after.get(rel))
    )
    refused = {rel: reason for rel in changed if (reason := _refusal(rel, after.get(rel)))}
    refused.update(escaping_links(before, after, refused))
    changes: list[FsChange] = []
    for rel in changed:
        old, new = before.get(rel), after.get(rel)
        if new is None:
            assert old is not None
            changes.append(
                FsChange(
                    rel, "deleted", old.kind, old.mode, None, old.size, refused=refused.get(rel, "")
                )
            )
            continue
        mode = kept_mode(new.kind, new.mode) if new.kind in ("file", "dir") else new.mode
        note = f"the run asked for mode {new.mode:04o}" if mode != new.mode else ""
        changes.append(
            FsChange(
                rel,
                "added" if old is None else "modified",
                new.kind,
                old.mode if old else None,
                mode,
                new.size,
                refused=refused.get(rel, ""),
                target=new.target,
                note=note,
            )
        )
    return changes


def _differs(old: Entry | None, new: Entry | None) -> bool:
    if old == new:
        return False
    if old is None or new is None or old.kind != new.kind or new.kind not in ("file", "dir"):
        return True
    # Only the mode moved, and Keep would mask it back to what it was: nothing to apply.
    return old != Entry(new.kind, kept_mode(new.kind, new.mode), new.size, new.digest)


def _refusal(rel: str, entry: Entry | None) -> str:
    if not _is_utf8(rel):
        return "the name is not valid UTF-8"
    if entry is None:
        return ""
    if entry.kind == "other":
        return "special files (FIFOs, sockets, devices) are not kept"
    if entry.kind == "symlink" and not _is_utf8(entry.target):
        return "the link's target is not valid UTF-8"
    return ""


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
