"""A verified undo: the state's digest before the forward run and after the undo, compared.

Discard (fs) and rollback (SQLite, PostgreSQL) promise the state as it was; a mismatch means
something broke that promise, so it is logged as an error with both digests, not only returned.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from executor.kinds.fs_walk import open_regular, parent_of

logger = logging.getLogger(__name__)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class UndoCheck:
    before: str  # the state's digest before the forward run
    after: str  # and after the undo
    # What was read when not the whole state: PostgreSQL's touched tables (schema.table).
    tables: tuple[str, ...] | None = None

    @property
    def matched(self) -> bool:
        return self.before == self.after

    def as_json(self) -> dict[str, object]:
        shown: dict[str, object] = {
            "before": self.before,
            "after": self.after,
            "matched": self.matched,
        }
        if self.tables is not None:
            shown["tables"] = list(self.tables)
        return shown


def checked(
    before: str,
    after: str,
    *,
    what: str,
    run_id: str,
    tables: tuple[str, ...] | None = None,
) -> UndoCheck:
    """The check, with the alarm raised when `what` (discard, rollback) did not restore."""
    check = UndoCheck(before, after, tables)
    if not check.matched:
        logger.error(
            "%s left a state other than before the run",
            what,
            extra={"run_id": run_id, "before": before, "after": after, "tables": tables},
        )
    return check


def file_digest(root: Path, rel: str) -> str:
    """sha256 of the regular file `rel` under `root` (no link followed); "" when missing."""
    try:
        with parent_of(root, rel) as (parent, name):
            fd = open_regular(parent, name)
    except FileNotFoundError:
        return ""
    h = hashlib.sha256()
    with open(fd, "rb", closefd=True) as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


__all__ = ["UndoCheck", "checked", "file_digest"]
