"""Read-only views of a folder tree: scan it, copy it, and list how two trees differ.

Symbolic links are never followed: a link is an entry of its own (its target text), so a
hostile link cannot make us read or copy anything outside the tree.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

EntryKind = Literal["file", "dir", "symlink", "other"]
Action = Literal["added", "modified", "deleted"]

# Text diffs are for people: past these sizes the change list says "large file" instead.
DIFF_MAX_INPUT_BYTES = 256 * 1024
DIFF_MAX_OUTPUT_CHARS = 64 * 1024
_CHUNK = 1 << 20


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

    path: str
    action: Action
    kind: EntryKind  # the entry after the run (before it, for a deletion)
    old_mode: int | None
    new_mode: int | None
    size: int
    binary: bool = False
    diff: str = ""  # unified diff for text files
    refused: str = ""  # non-empty: Keep leaves this path alone, and this says why

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["old_mode"] = None if self.old_mode is None else f"{self.old_mode:04o}"
        data["new_mode"] = None if self.new_mode is None else f"{self.new_mode:04o}"
        return data


def scan(root: Path) -> dict[str, Entry]:
    """Every entry under `root` (not `root` itself) by relative POSIX path, links unfollowed."""
    entries: dict[str, Entry] = {}
    _scan_into(root, "", entries)
    return entries


def _scan_into(root: Path, prefix: str, entries: dict[str, Entry]) -> None:
    with os.scandir(root / prefix if prefix else root) as it:
        for item in it:
            rel = f"{prefix}{item.name}"
            st = item.stat(follow_symlinks=False)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = Entry("symlink", mode, 0, target=os.readlink(item.path))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = Entry("dir", mode, 0)
                _scan_into(root, rel + "/", entries)
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = Entry("file", mode, st.st_size, digest=_digest(item.path))
            else:  # FIFOs, sockets, device nodes: never copied, never applied
                entries[rel] = Entry("other", mode, 0)


def read_file(path: str | Path) -> bytes:
    """A regular file's bytes, refusing to follow a symlink in the last component."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _digest(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def copy_tree(src: Path, dst: Path, *, uid: int | None = None, gid: int | None = None) -> None:
    """Copy `src` into the new folder `dst` exactly: bytes, modes, mtimes, dot-files, links.

    A full copy, not hard links or reflinks: the sandbox writes the copy, and a shared inode
    would let it change the original. `uid`/`gid` make the copy the sandbox user's own.
    """
    os.mkdir(dst, 0o700)
    entries = scan(src)
    for rel, entry in entries.items():
        target = dst / rel
        if entry.kind == "dir":
            os.mkdir(target, 0o700)
        elif entry.kind == "file":
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(read_file(src / rel))
            os.utime(target, ns=_mtime_ns(src / rel))
        elif entry.kind == "symlink":
            os.symlink(entry.target, target)
        else:
            continue
        if uid is not None:
            os.lchown(target, uid, gid if gid is not None else uid)
    # Modes last and deepest first, so a read-only folder does not block filling it.
    for rel in sorted(entries, key=lambda p: p.count("/"), reverse=True):
        if entries[rel].kind in ("dir", "file"):
            os.chmod(dst / rel, entries[rel].mode)
    os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))
    if uid is not None:
        os.chown(dst, uid, gid if gid is not None else uid)


def _mtime_ns(path: Path) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return (st.st_atime_ns, st.st_mtime_ns)


def diff_trees(before_root: Path, after_root: Path) -> list[FsChange]:
    """What changed from `before_root` to `after_root`, sorted by path."""
    before, after = scan(before_root), scan(after_root)
    changes: list[FsChange] = []
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old == new:
            continue
        if new is None:
            assert old is not None
            changes.append(FsChange(rel, "deleted", old.kind, old.mode, None, old.size))
            continue
        action: Action = "added" if old is None else "modified"
        text, binary = "", False
        if new.kind == "file":
            old_bytes = read_file(before_root / rel) if old and old.kind == "file" else b""
            text, binary = _text_diff(rel, old_bytes, read_file(after_root / rel))
        elif new.kind == "symlink":
            text = f"-> {new.target}"
        changes.append(
            FsChange(
                rel,
                action,
                new.kind,
                old.mode if old else None,
                new.mode,
                new.size,
                binary=binary,
                diff=text,
                refused=_refusal(after_root, rel, new),
            )
        )
    return changes


def _text_diff(rel: str, old: bytes, new: bytes) -> tuple[str, bool]:
    if len(old) > DIFF_MAX_INPUT_BYTES or len(new) > DIFF_MAX_INPUT_BYTES:
        return "(large file: no diff shown)", False
    try:
        old_text, new_text = old.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        return "", True
    if "\x00" in old_text or "\x00" in new_text:
        return "", True
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile=f"a/{rel}",
        tofile=f"b/{rel}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    if len(text) > DIFF_MAX_OUTPUT_CHARS:
        text = text[:DIFF_MAX_OUTPUT_CHARS] + "\n(diff cut short)\n"
    return text, False


def _refusal(root: Path, rel: str, entry: Entry) -> str:
    if entry.kind == "other":
        return "special files (FIFOs, sockets, devices) are not kept"
    if entry.kind == "symlink" and escapes(root, rel):
        return "the link points outside the workspace"
    return ""


def escapes(root: Path, rel: str) -> bool:
    """Whether the symlink at `rel` resolves, link by link, to a place above `root`.

    Absolute targets escape by definition. Resolution is done by hand inside `root`, because a
    lexical check misses links such as `l -> .` combined with `s -> l/..`.
    """
    stack = rel.split("/")[:-1]
    pending = os.readlink(root / rel).split("/")
    if pending[0] == "":
        return True
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return True
            stack.pop()
            continue
        candidate = root.joinpath(*stack, part)
        if candidate.is_symlink():
            hops += 1
            if hops > 40:  # a loop: the kernel gives ELOOP, so it reaches nothing
                return False
            link = os.readlink(candidate).split("/")
            if link[0] == "":
                return True
            pending = link + pending
            continue
        stack.append(part)
    return False
