"""The change list a person is shown (and the host stores): capped in entries and diff size.

Keep never uses this list: it recomputes the whole change from disk and applies all of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path

from executor.kinds.fs_tree import FsChange
from executor.kinds.fs_walk import read_regular

MAX_LISTED_CHANGES = 500
MAX_DIFF_CHARS_TOTAL = 256 * 1024  # over all listed changes
# Past these sizes one change says "large file" instead of a diff.
DIFF_MAX_INPUT_BYTES = 256 * 1024
DIFF_MAX_OUTPUT_CHARS = 64 * 1024


@dataclass(frozen=True)
class Listing:
    changes: list[FsChange]  # the first MAX_LISTED_CHANGES, with diffs while the budget lasts
    total: int  # how many changes there are in all
    diffs_cut: int  # listed changes left without their diff because the budget ran out

    @property
    def note(self) -> str:
        """What was left out, for the change's message ("" when nothing was)."""
        parts = []
        if self.total > len(self.changes):
            parts.append(f"{self.total - len(self.changes):,} more changes not listed")
        if self.diffs_cut:
            parts.append(f"diffs cut after {MAX_DIFF_CHARS_TOTAL // 1024} KiB")
        return "; ".join(parts) + ("." if parts else "")


def listing(changes: list[FsChange], before_root: Path, after_root: Path) -> Listing:
    """`changes` as shown: capped, each listed text file with its diff while the budget lasts."""
    budget = MAX_DIFF_CHARS_TOTAL
    shown: list[FsChange] = []
    cut = 0
    for change in changes[:MAX_LISTED_CHANGES]:
        text, binary = _describe(change, before_root, after_root)
        if len(text) > budget:
            text, cut = "", cut + 1
        budget -= len(text)
        shown.append(dataclasses.replace(change, diff=text, binary=binary))
    return Listing(shown, len(changes), cut)


def _describe(change: FsChange, before_root: Path, after_root: Path) -> tuple[str, bool]:
    if change.kind == "symlink" and change.action != "deleted":
        return f"-> {change.target}", False
    if change.kind != "file" or change.action == "deleted" or change.refused:
        return "", False
    if change.size > DIFF_MAX_INPUT_BYTES:
        return "(large file: no diff shown)", False
    limit = DIFF_MAX_INPUT_BYTES + 1
    try:
        new = read_regular(after_root, change.path, limit=limit)
    except OSError:
        return "", False
    old = b""
    if change.action == "modified":
        with contextlib.suppress(OSError):  # it was a folder or a link: diff against nothing
            old = read_regular(before_root, change.path, limit=limit)
    if len(old) > DIFF_MAX_INPUT_BYTES or len(new) > DIFF_MAX_INPUT_BYTES:
        return "(large file: no diff shown)", False
    return _text_diff(change.path, old, new)


def _text_diff(rel: str, old: bytes, new: bytes) -> tuple[str, bool]:
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
