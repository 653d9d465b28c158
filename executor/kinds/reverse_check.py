"""What a reverse program run after a Keep left different from the state before the forward run.

Discard and rollback promise the earlier state, so a mismatch there is an alarm
(executor.kinds.undo_check). A reverse program after a Keep promises nothing the host can hold
it to: it is the LLM's or the person's code. So this is no alarm but a plain report, "the undo
left these differences": the workspace now against the manifest the kept forward run began from
(remembered by fs Keep, executor.kinds.fs.kept_base), compared path by path as a rehearsal
compares (type, mode, size, content hash, link target).
"""

from __future__ import annotations

import logging
from typing import Any

from executor.kinds.fs import FsWorkspace, kept_base
from executor.kinds.fs_tree import scan, state_digest
from executor.kinds.fs_walk import TreeTooLarge
from executor.kinds.rehearsal import fs_compare

logger = logging.getLogger(__name__)
MAX_SHOWN = 50  # paths named; `differences` counts them all


def fs_reverse_check(workspace: FsWorkspace, *, forward_run_id: str) -> dict[str, Any] | None:
    """{"before", "after", "matched", "differences", "diff"} for the workspace now against
    the one the kept forward run `forward_run_id` began from; None when that is not
    remembered (not kept, or older than the last fs.KEPT_BASES kept runs)."""
    before = kept_base(workspace, forward_run_id)
    if before is None:
        return None
    try:
        with workspace.locked():
            now = scan(workspace.root)
    except TreeTooLarge as exc:
        return {
            "before": state_digest(before),
            "after": f"unreadable: {exc}",
            "matched": False,
            "differences": None,
            "diff": [],
        }
    diff = fs_compare(before, now)
    if diff:
        logger.info(
            "the reverse program left differences",
            extra={"forward_run_id": forward_run_id, "differences": len(diff)},
        )
    return {
        "before": state_digest(before),
        "after": state_digest(now),
        "matched": not diff,
        "differences": len(diff),
        "diff": diff[:MAX_SHOWN],
    }


__all__ = ["MAX_SHOWN", "fs_reverse_check"]
