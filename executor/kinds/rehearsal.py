"""Rehearsal: run the forward program, then the reverse one, on a throwaway copy, and say
whether the reverse program gives back the state exactly.

    verdict = rehearsal.rehearse_fs(forward, reverse_for, limits=..., workspace=ws,
                                    scratch=folder, uid=uid, run=run_job)
    verdict.restored, verdict.diff, verdict.counters

`run` runs a prepared job in a sandbox (the caller's backend); `reverse_for` builds the
reverse program's spec from the forward run's result (FORWARD_OUTPUT). The host decides: the
states are read by the host (fs: a no-follow scan of the copy; db: the db process, on the
connection holding the transaction), never by anything the programs can reach.

- fs: a copy of the workspace; each program's change is kept into the copy the way Keep
  applies it to the real one (the installer's rules: masked modes, vetted links), so a
  reverse program that leans on a mode Keep would not give back is caught here too.
- SQLite: a copy of the file, both programs in one transaction rolled back at the end.
- PostgreSQL: both programs in one REPEATABLE READ transaction, always rolled back. Its costs
  are real: sequence values taken stay taken (the counters say which), and the locks the
  programs take are held while the rehearsal runs.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.kinds import db, fs
from executor.kinds.errors import NothingPending
from executor.kinds.fs_tree import Entry, copy_tree, safe_text, scan, state_digest
from executor.kinds.fs_walk import remove_tree
from executor.kinds.job import Job
from executor.limits import Limits
from executor.result import RunResult
from executor.spec import RunSpec

RESTORED = "the reverse program restores the state exactly"
MAX_DIFF_ENTRIES = 200

Runner = Callable[[Job], RunResult]
ReverseFor = Callable[[RunResult], RunSpec]


@dataclass(frozen=True)
class Rehearsal:
    """A rehearsal's verdict. `restored` only when both programs succeeded and the states
    before the forward run and after the reverse run are the same (counters aside)."""

    restored: bool
    message: str
    diff: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, Any] = field(default_factory=dict)
    before: str = ""  # the states' digests
    after: str = ""
    forward: RunResult | None = None
    reverse: RunResult | None = None
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "restored": self.restored,
            "message": self.message,
            "diff": self.diff,
            "counters": self.counters,
            "before": self.before,
            "after": self.after,
            "seconds": round(self.seconds, 3),
        }


def fs_compare(before: dict[str, Entry], after: dict[str, Entry]) -> list[dict[str, Any]]:
    """Each path whose entry differs: missing after, extra after, or what about it moved."""
    diff: list[dict[str, Any]] = []
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old == new:
            continue
        item: dict[str, Any] = {"path": safe_text(rel)}
        if new is None:
            item["change"] = "missing"
        elif old is None:
            item["change"] = "extra"
        else:
            item["change"] = "differs"
            item["what"] = [
                name
                for name in ("kind", "mode", "size", "digest", "target")
                if getattr(old, name) != getattr(new, name)
            ]
        for side, entry in (("before", old), ("after", new)):
            if entry is not None:
                item[side] = {
                    "kind": entry.kind,
                    "mode": f"{entry.mode:04o}",
                    "size": entry.size,
                    "digest": entry.digest,
                    "target": safe_text(entry.target),
                }
        diff.append(item)
        if len(diff) >= MAX_DIFF_ENTRIES:
            break
    return diff


def _failed(
    which: str,
    result: RunResult | None,
    started: float,
    forward: RunResult | None,
    reverse: RunResult | None = None,
    cap: str = "",
) -> Rehearsal:
    if cap:
        why = f"it broke a cap: {cap}"
    elif result is None:
        why = "it did not succeed"
    elif result.timed_out:
        why = "it ran out of time"
    else:
        why = f"it ended with exit code {result.exit_code}"
    return Rehearsal(
        False,
        f"the rehearsal could not finish: the {which} program failed ({why})",
        forward=forward,
        reverse=reverse,
        seconds=time.monotonic() - started,
    )


def rehearse_fs(
    forward: RunSpec,
    reverse_for: ReverseFor,
    *,
    limits: Limits,
    workspace: fs.FsWorkspace,
    scratch: Path,
    uid: int | None,
    run: Runner,
    quota_bytes: int | None = None,
) -> Rehearsal:
    """Rehearse on a copy of `workspace` made in `scratch` (a host-only folder the sandbox
    user can reach); the real workspace is only read, and the copy is removed."""
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="rehearsal-", dir=scratch))
    folder.chmod(0o711)
    try:
        with workspace.locked():  # a consistent copy: no Keep or upload half way through it
            copy_tree(workspace.root, folder / "root")
        throwaway = fs.FsWorkspace(folder / "root", folder / "state")
        before = scan(throwaway.root)

        def kept(spec: RunSpec, which: str) -> tuple[RunResult, str]:
            """Run `spec` on the copy and keep its change as Keep would; the cap it broke."""
            with fs.prepared(
                spec,
                limits=limits,
                workspace=throwaway,
                run_id=f"rehearsal-{which}",
                uid=uid,
                quota_bytes=quota_bytes,
            ) as job:
                result = run(job)
                outcome = job.finish(result)
            if outcome.pending is not None:
                outcome.pending.keep()
            return result, outcome.cap

        first, cap = kept(forward, "forward")
        if not first.ok or cap:
            return _failed("forward", first, started, first, cap=cap)
        second, cap = kept(reverse_for(first), "reverse")
        if not second.ok or cap:
            return _failed("reverse", second, started, first, second, cap=cap)
        after = scan(throwaway.root)
    finally:
        remove_tree(folder)
    diff = fs_compare(before, after)
    return Rehearsal(
        not diff,
        RESTORED if not diff else f"{len(diff)} path(s) differ after the reverse program",
        diff=diff,
        before=state_digest(before),
        after=state_digest(after),
        forward=first,
        reverse=second,
        seconds=time.monotonic() - started,
    )


def rehearse_db(
    forward: RunSpec,
    reverse_for: ReverseFor,
    *,
    limits: Limits,
    target: db.Target,
    control_base: Path,
    run_id: str,
    run: Runner,
    **options: Any,
) -> Rehearsal:
    """Rehearse both programs in one transaction that is always rolled back; `options` go to
    db.prepared (owner_uid, hide_env, caps, owner, ...). A SQLite target's workspace is held
    (reserved) while it runs, like a db run's."""
    started = time.monotonic()
    with db.prepared(
        forward,
        limits=limits,
        target=target,
        control_base=control_base,
        run_id=run_id,
        repeatable_read=True,
        **options,
    ) as job:
        job.session.rehearsal_begin()
        first = run(job)
        outcome = job.finish(first)
        if outcome.pending is None:
            return _failed("forward", first, started, first)
        second_job = job.then(reverse_for(first))
        try:
            second = run(second_job)
            second_outcome = second_job.finish(second)
            if second_outcome.pending is None:
                return _failed("reverse", second, started, first, second)
            verdict = second_job.session.rehearsal_verdict()  # rolls back
        finally:
            with contextlib.suppress(NothingPending):
                if not second_job.finished:
                    second_job.finish(None)
                outcome.pending.undo()  # the rehearsal never commits
    diff: list[dict[str, Any]] = verdict["diff"]
    return Rehearsal(
        bool(verdict["restored"]),
        RESTORED if verdict["restored"] else f"{len(diff)} table change(s) remain",
        diff=diff,
        counters=verdict["counters"],
        before=verdict["before"],
        after=verdict["after"],
        forward=first,
        reverse=second,
        seconds=time.monotonic() - started,
    )


__all__ = [
    "RESTORED",
    "Rehearsal",
    "Runner",
    "fs_compare",
    "rehearse_db",
    "rehearse_fs",
]
