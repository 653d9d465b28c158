"""The `fs` kind: a run changes a private copy of the workspace; Keep applies, Undo discards.

    with kinds.fs.prepared(spec, limits=limits, workspace=ws, run_id="7", uid=uid) as job:
        result = executor.run(job.spec, limits=job.limits, mounts=job.mounts)
        outcome = job.finish(result)   # outcome.pending: keep() or undo() it later

Layout of a workspace's state folder (never inside the workspace, never seen by a sandbox):

    STATE/lock              flock()ed around every begin/reserve/keep/undo
    STATE/pending/          exists while a run holds the workspace (running or awaiting a
                            choice); a size-capped nosuid,nodev tmpfs when a quota is asked
                            for and the host lets us mount (executor.quota)
    STATE/pending/meta.json the run id, the workspace's manifest when the run began, the uid
    STATE/pending/tree/     the run's copy, bind-mounted read-write as the sandbox's /workspace
    STATE/pending/private/  a reservation's host-only folder (FsWorkspace.reserve)
    STATE/kept/RUN.json     the manifest a kept run began from, for the last KEPT_BASES kept
                            runs: what a reverse program after the Keep is compared with
                            (executor.kinds.reverse_check)

A full copy rather than an overlay: the copy is exact by construction (modes, dot-files,
ignored files, links kept as links), deletions need no whiteout decoding, and the sandbox only
ever sees the copy, so nothing outside it -- `../` included -- is reachable. The host then
reads the copy as untrusted input: capped walks (fs_walk), vetted names and links (fs_tree,
fs_links), a capped listing (fs_listing) and an installer-like apply (fs_apply).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType

from executor import quota
from executor.kinds.errors import NothingPending, WorkspaceBusy, WorkspaceConflict
from executor.kinds.fs_apply import apply_changes
from executor.kinds.fs_listing import Listing, listing
from executor.kinds.fs_tree import Entry, FsChange, copy_tree, diff_entries, scan, state_digest
from executor.kinds.fs_walk import MAX_ENTRIES, TreeTooLarge, remove_tree
from executor.kinds.job import Job
from executor.kinds.sandbox import Mount
from executor.kinds.undo_check import UndoCheck, checked
from executor.limits import Limits
from executor.result import RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)

# The copy's tmpfs holds at most this many inodes: the entry cap, plus room to notice it.
MAX_INODES = MAX_ENTRIES + 1024


class FsWorkspace:
    """One workspace folder and its state folder. Safe across threads and processes."""

    def __init__(self, root: Path, state_dir: Path) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.pending_dir = self.state_dir / "pending"

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

    def begin(
        self, run_id: str, *, uid: int | None = None, quota_bytes: int | None = None
    ) -> PendingFs:
        """Copy the workspace for run `run_id`, the copy owned by `uid` (the sandbox's host
        uid, who also owns what Keep writes). Raises WorkspaceBusy if another run holds it,
        TreeTooLarge if the workspace itself is past the caps or larger than `quota_bytes`."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self.locked():
            self._hold(run_id, "fs", quota_bytes, owner_uid=uid)
            try:
                manifest = {rel: asdict(e) for rel, e in scan(self.root).items()}
                _write_meta(self.pending_dir, run_id, "fs", uid, manifest)
                copy_tree(self.root, self.pending_dir / "tree", uid=uid)
            except OSError as exc:
                _discard(self.pending_dir)
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise TreeTooLarge("the workspace is larger than a run's quota") from exc
                raise
            except TreeTooLarge as exc:
                _discard(self.pending_dir)
                raise TreeTooLarge(f"the workspace is too large for a run: {exc}") from exc
            except BaseException:
                _discard(self.pending_dir)
                raise
        logger.info("fs workspace copied", extra={"run_id": run_id, "entries": len(manifest)})
        return PendingFs(self, run_id)

    def reserve(self, run_id: str, *, quota_bytes: int | None = None) -> Reservation:
        """Hold the workspace for `run_id` without copying it (the db kind's SQLite copy).

        The reservation makes the workspace busy exactly like a pending fs change (begin,
        reserve and uploads are refused) and owns `reservation.folder`, a private 0700 folder
        the sandbox never sees, inside the (quota-capped, when asked) pending state. Release
        it with `release()` or by leaving `with workspace.reserve(...) as reservation:`.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with self.locked():
            self._hold(run_id, "reserved", quota_bytes, owner_uid=None)
            try:
                _write_meta(self.pending_dir, run_id, "reserved", None, {})
                os.mkdir(self.pending_dir / "private", 0o700)
            except BaseException:
                _discard(self.pending_dir)
                raise
        logger.info("workspace reserved", extra={"run_id": run_id})
        return Reservation(self, run_id)

    def pending(self) -> PendingFs | None:
        """The run that holds the workspace (still running, awaiting a choice, or a
        reservation's), if any."""
        meta = _read_meta(self.pending_dir)
        return PendingFs(self, meta["run_id"]) if meta else None

    def _hold(self, run_id: str, kind: str, quota_bytes: int | None, owner_uid: int | None) -> None:
        """Create STATE/pending (with the lock held), or WorkspaceBusy naming its holder."""
        for _ in range(2):
            try:
                # 0711: bwrap runs as an unprivileged host uid and must reach tree/ to bind it.
                os.mkdir(self.pending_dir, 0o711)
                break
            except FileExistsError:
                holder = _read_meta(self.pending_dir).get("run_id")
                if holder is None:  # left by a crash before its meta was written
                    _discard(self.pending_dir)
                    continue
                raise WorkspaceBusy(
                    f"the workspace is in use by run {holder}; keep or discard its changes first"
                ) from None
        if quota_bytes is not None:
            try:  # the tmpfs root gets 0711 too; False: this host cannot mount, plain folder
                quota.mount_tmpfs(self.pending_dir, size_bytes=quota_bytes, max_inodes=MAX_INODES)
            except BaseException:
                _discard(self.pending_dir)
                raise


class Reservation:
    """A workspace held by a run that needs no copy of it (FsWorkspace.reserve)."""

    def __init__(self, workspace: FsWorkspace, run_id: str) -> None:
        self.workspace = workspace
        self.run_id = run_id
        self.pending_dir = workspace.pending_dir
        self.folder = workspace.pending_dir / "private"

    def release(self) -> None:
        """Discard the private folder and free the workspace; a no-op once released."""
        with self.workspace.locked():
            if _read_meta(self.pending_dir).get("run_id") == self.run_id:
                _discard(self.pending_dir)
                logger.info("workspace released", extra={"run_id": self.run_id})

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class PendingFs:
    """A run's copy of the workspace, until Keep or Discard."""

    def __init__(self, workspace: FsWorkspace, run_id: str) -> None:
        self.workspace = workspace
        self.run_id = run_id
        self.tree = workspace.pending_dir / "tree"

    def listing(self) -> Listing:
        """What the run changed, relative to the workspace as it is now, as shown to a
        person: capped (fs_listing). Raises TreeTooLarge when the copy breaks a cap."""
        self._check_current()
        changes = diff_entries(scan(self.workspace.root), scan(self.tree))
        return listing(changes, self.workspace.root, self.tree)

    def changes(self) -> list[FsChange]:
        """The listed changes (at most fs_listing.MAX_LISTED_CHANGES, see listing())."""
        return self.listing().changes

    def keep(self, *, owner_uid: int | None = None) -> list[FsChange]:
        """Apply the run's whole change to the workspace, then forget the copy.

        What is written belongs to `owner_uid`, by default the uid the copy was made for.
        Returns the changes as listed (capped like listing(); all were applied). Raises
        WorkspaceConflict (and applies nothing) if the workspace itself changed since the run
        began, because the result would then mix two histories.
        """
        with self.workspace.locked():
            meta = self._check_current()
            base = {rel: Entry(**e) for rel, e in meta.get("manifest", {}).items()}
            now = scan(self.workspace.root)
            if now != base:
                raise WorkspaceConflict("the workspace changed since the run began")
            changes = diff_entries(now, scan(self.tree))
            shown = listing(changes, self.workspace.root, self.tree).changes  # diffs: before
            owner = meta.get("owner_uid") if owner_uid is None else owner_uid
            apply_changes(self.workspace.root, self.tree, changes, owner_uid=owner)
            _discard(self.workspace.pending_dir)
            _remember_base(self.workspace.state_dir / "kept", self.run_id, meta)
        logger.info("fs change kept", extra={"run_id": self.run_id, "changes": len(changes)})
        return shown

    def undo(self) -> UndoCheck:
        """Discard the run's copy; the workspace was never touched, and the returned check
        proves it (the workspace's digest when the run began and now; a mismatch is logged as
        an error)."""
        with self.workspace.locked():
            meta = self._check_current()
            _discard(self.workspace.pending_dir)
            before = {rel: Entry(**e) for rel, e in meta.get("manifest", {}).items()}
            try:
                now = state_digest(scan(self.workspace.root))
            except TreeTooLarge as exc:  # the workspace itself broke a cap meanwhile
                now = f"unreadable: {exc}"
        logger.info("fs change undone", extra={"run_id": self.run_id})
        return checked(state_digest(before), now, what="discard", run_id=self.run_id)

    def _check_current(self) -> dict:
        meta = _read_meta(self.workspace.pending_dir)
        if meta.get("run_id") != self.run_id or meta.get("kind", "fs") != "fs":
            raise NothingPending(f"run {self.run_id} has no pending workspace change")
        return meta


@dataclass(frozen=True)
class FsOutcome:
    """How an fs run ended. `pending` is None when there is nothing to decide (the copy is
    already discarded); `changes` is the capped listing, `total` counts them all."""

    pending: PendingFs | None
    changes: list[FsChange]
    total: int
    message: str
    cap: str = ""  # the cap the run's copy broke (so nothing was kept), "" otherwise


@dataclass
class FsJob(Job):
    """The run to start on the workspace copy (`spec`, `limits`, `mounts`), and its ending."""

    pending: PendingFs | None = field(default=None, repr=False)
    finished: bool = False

    def finish(self, result: RunResult | None) -> FsOutcome:
        """Settle the run: discard its copy unless it succeeded and changed something
        within the caps; otherwise the outcome's PendingFs awaits keep() or undo()."""
        if self.pending is None or self.finished:
            raise RuntimeError("finish() is called once per prepared job")
        pending, self.finished = self.pending, True
        try:
            return _settle(pending, result)
        except BaseException:
            with contextlib.suppress(NothingPending):
                pending.undo()
            raise


def _settle(pending: PendingFs, result: RunResult | None) -> FsOutcome:
    if result is None or not result.ok:
        pending.undo()
        return FsOutcome(None, [], 0, "The run did not succeed; nothing changed.")
    try:
        shown = pending.listing()
    except TreeTooLarge as exc:
        pending.undo()
        logger.info("fs change over a cap", extra={"run_id": pending.run_id, "cap": str(exc)})
        message = f"Nothing was kept: the run's workspace broke a cap ({exc})."
        return FsOutcome(None, [], 0, message, cap=str(exc))
    if not shown.total:
        pending.undo()
        return FsOutcome(None, [], 0, "The run changed no files.")
    return FsOutcome(pending, shown.changes, shown.total, shown.note)


@contextlib.contextmanager
def prepared(
    spec: RunSpec,
    *,
    limits: Limits,
    workspace: FsWorkspace,
    run_id: str,
    uid: int | None,
    quota_bytes: int | None = None,
) -> Iterator[FsJob]:
    """Copy `workspace` for run `run_id` and yield the job that runs `spec` on the copy.

    `uid` is the sandbox's host uid (executor.kinds.sandbox.sandbox_host_uid): it owns the
    copy and what Keep writes. `quota_bytes` caps the copy (tmpfs) where the host allows.
    Raises WorkspaceBusy when another run holds the workspace. Leaving the block without
    `job.finish(result)` discards the copy.
    """
    pending = workspace.begin(run_id, uid=uid, quota_bytes=quota_bytes)
    job = FsJob(
        spec,
        dataclasses.replace(limits, network="none"),
        (Mount(pending.tree, "/workspace", writable=True),),
        pending=pending,
    )
    try:
        yield job
    finally:
        if not job.finished:
            with contextlib.suppress(NothingPending):
                pending.undo()


def _write_meta(
    pending_dir: Path, run_id: str, kind: str, owner_uid: int | None, manifest: dict
) -> None:
    meta = {
        "run_id": run_id,
        "kind": kind,
        "began_at": time.time(),
        "owner_uid": owner_uid,
        "manifest": manifest,
    }
    temp = pending_dir / "meta.json.tmp"
    temp.write_text(json.dumps(meta, ensure_ascii=True))
    os.replace(temp, pending_dir / "meta.json")


KEPT_BASES = 8  # kept runs whose starting manifest is remembered, per workspace


def _remember_base(folder: Path, run_id: str, meta: dict) -> None:
    """Keep the manifest the kept run began from (its meta's), forgetting the oldest past
    KEPT_BASES. Host-side only, like the rest of the state folder."""
    folder.mkdir(mode=0o700, exist_ok=True)
    temp = folder / f"{run_id}.json.tmp"
    temp.write_text(json.dumps(meta.get("manifest", {}), ensure_ascii=True))
    os.replace(temp, folder / f"{run_id}.json")
    remembered = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    for old in remembered[:-KEPT_BASES]:
        old.unlink(missing_ok=True)


def kept_base(workspace: FsWorkspace, run_id: str) -> dict[str, Entry] | None:
    """The workspace's entries when the kept run `run_id` began; None if not remembered."""
    if not run_id.replace("-", "").replace("_", "").isalnum():
        return None  # never a path of its own: the file is named by the run's id
    try:
        raw = json.loads((workspace.state_dir / "kept" / f"{run_id}.json").read_text())
    except FileNotFoundError:
        return None
    return {rel: Entry(**entry) for rel, entry in raw.items()}


def _read_meta(pending_dir: Path) -> dict:
    try:
        return dict(json.loads((pending_dir / "meta.json").read_text()))
    except FileNotFoundError:
        return {}


def _discard(pending_dir: Path) -> None:
    """Forget a pending state: first its meta (so it no longer looks pending), then its tmpfs,
    then whatever is left on disk, renamed aside first so a crash never looks pending."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pending_dir / "meta.json")
    quota.unmount(pending_dir)
    trash = pending_dir.with_name(f"trash-{time.time_ns()}")
    try:
        os.rename(pending_dir, trash)
    except FileNotFoundError:
        return
    remove_tree(trash)


__all__ = [
    "Entry",
    "FsChange",
    "FsJob",
    "FsOutcome",
    "FsWorkspace",
    "PendingFs",
    "Reservation",
    "TreeTooLarge",
    "kept_base",
    "prepared",
]
