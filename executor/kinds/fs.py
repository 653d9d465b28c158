"""The `fs` kind: a run changes a private copy of the workspace; Keep applies, Undo discards.

Layout of a workspace's state folder (never inside the workspace, never seen by a sandbox):

    STATE/lock              flock()ed around every begin/keep/undo
    STATE/pending/          exists while a run holds the workspace (running or awaiting a choice)
    STATE/pending/meta.json the run id and the workspace's manifest when the run began
    STATE/pending/tree/     the run's copy, bind-mounted read-write as the sandbox's /workspace

A full copy rather than an overlay: the copy is exact by construction (modes, dot-files,
ignored files, links kept as links), deletions need no whiteout decoding, and the sandbox only
ever sees the copy, so nothing outside it -- `../` included -- is reachable.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from executor.backends.base import Backend, OutputCallback
from executor.cancel import CancelToken
from executor.kinds.errors import NothingPending, WorkspaceBusy, WorkspaceConflict
from executor.kinds.fs_apply import apply_changes
from executor.kinds.fs_tree import Entry, FsChange, copy_tree, diff_trees, scan
from executor.kinds.sandbox import Mount, run_with_mounts, sandbox_host_uid
from executor.limits import Limits
from executor.result import RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)


class FsWorkspace:
    """One workspace folder and its state folder. Safe across threads and processes."""

    def __init__(self, root: Path, state_dir: Path) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self._pending_dir = self.state_dir / "pending"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the workspace's lock: no begin, keep, undo or upload happens meanwhile."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def begin(self, run_id: str, *, uid: int | None = None) -> PendingFs:
        """Copy the workspace for run `run_id`. Raises WorkspaceBusy if another run holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self.locked():
            try:
                # 0711: bwrap runs as an unprivileged host uid and must reach tree/ to bind it.
                os.mkdir(self._pending_dir, 0o711)
            except FileExistsError:
                holder = _read_meta(self._pending_dir).get("run_id", "?")
                raise WorkspaceBusy(
                    f"the workspace is in use by run {holder}; keep or undo its changes first"
                ) from None
            try:
                manifest = {rel: asdict(e) for rel, e in scan(self.root).items()}
                meta = {"run_id": run_id, "began_at": time.time(), "manifest": manifest}
                (self._pending_dir / "meta.json").write_text(json.dumps(meta))
                copy_tree(self.root, self._pending_dir / "tree", uid=uid)
            except BaseException:
                shutil.rmtree(self._pending_dir, ignore_errors=True)
                raise
        logger.info("fs workspace copied", extra={"run_id": run_id, "entries": len(manifest)})
        return PendingFs(self, run_id)

    def pending(self) -> PendingFs | None:
        """The run whose change awaits Keep/Undo (or is still running), if any."""
        meta = _read_meta(self._pending_dir)
        return PendingFs(self, meta["run_id"]) if meta else None


class PendingFs:
    """A run's copy of the workspace, until Keep or Undo."""

    def __init__(self, workspace: FsWorkspace, run_id: str) -> None:
        self.workspace = workspace
        self.run_id = run_id
        self.tree = workspace.state_dir / "pending" / "tree"

    def changes(self) -> list[FsChange]:
        """What the run changed, relative to the workspace as it is now."""
        self._check_current()
        return diff_trees(self.workspace.root, self.tree)

    def keep(self) -> list[FsChange]:
        """Apply the run's changes to the workspace exactly, then forget the copy.

        Raises WorkspaceConflict (and applies nothing) if the workspace itself changed since
        the run began, because the result would then mix two histories.
        """
        with self.workspace.locked():
            self._check_current()
            base = _read_meta(self.tree.parent).get("manifest", {})
            now = {rel: asdict(e) for rel, e in scan(self.workspace.root).items()}
            if now != base:
                raise WorkspaceConflict("the workspace changed since the run began")
            changes = diff_trees(self.workspace.root, self.tree)
            apply_changes(self.workspace.root, self.tree, changes)
            _discard(self.tree.parent)
        logger.info("fs change kept", extra={"run_id": self.run_id, "changes": len(changes)})
        return changes

    def undo(self) -> None:
        """Discard the run's copy; the workspace was never touched."""
        with self.workspace.locked():
            self._check_current()
            _discard(self.tree.parent)
        logger.info("fs change undone", extra={"run_id": self.run_id})

    def _check_current(self) -> None:
        if _read_meta(self.tree.parent).get("run_id") != self.run_id:
            raise NothingPending(f"run {self.run_id} has no pending workspace change")


def _read_meta(pending_dir: Path) -> dict:
    try:
        return dict(json.loads((pending_dir / "meta.json").read_text()))
    except FileNotFoundError:
        return {}


def _discard(pending_dir: Path) -> None:
    # The sandbox may have left read-only folders behind; make them removable first.
    for dirpath, dirnames, _ in os.walk(pending_dir):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    # Rename first so a crash mid-removal never looks like a pending change.
    trash = pending_dir.with_name(f"trash-{time.time_ns()}")
    os.rename(pending_dir, trash)
    shutil.rmtree(trash)


def fs_forward(
    backend: Backend,
    spec: RunSpec,
    *,
    limits: Limits,
    workspace: FsWorkspace,
    run_id: str,
    on_output: OutputCallback | None = None,
    cancel: CancelToken | None = None,
) -> tuple[RunResult, PendingFs | None]:
    """Run `spec` on a copy of `workspace`; return the result and the change awaiting a choice.

    A run that fails (non-zero exit, timeout, cancel, infrastructure error) leaves the
    workspace as it was: its copy is discarded and no PendingFs is returned.
    """
    pending = workspace.begin(run_id, uid=sandbox_host_uid(backend))
    try:
        mounts = [Mount(pending.tree, "/workspace", writable=True)]
        result = run_with_mounts(
            backend, spec, limits=limits, mounts=mounts, on_output=on_output, cancel=cancel
        )
    except BaseException:
        pending.undo()
        raise
    if not result.ok:
        pending.undo()
        return result, None
    return result, pending


__all__ = ["Entry", "FsChange", "FsWorkspace", "PendingFs", "fs_forward"]
