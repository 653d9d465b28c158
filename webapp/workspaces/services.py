"""Writes for workspaces and pending changes: upload, Keep, Discard, regenerate the reverse."""

from __future__ import annotations

import io
import logging
import os
import stat
import tarfile
import zipfile
from collections.abc import Collection
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from webapp import lifecycle, llm
from webapp.audit.services import audit_change
from webapp.executor_glue import (
    FsWorkspace,
    InvalidSpec,
    NothingPending,
    WorkspaceBusy,
    executor_get,
    fs_reverse_check,
)
from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection
from webapp.runs.payloads import ChangePayload, ChangeUpdatedEvent
from webapp.runs.publish import publish_run_event
from webapp.workspaces import decisions, uploads
from webapp.workspaces.models import ChangeStatus, PendingChange, Workspace, WorkspaceUse
from webapp.workspaces.waiting import waiting_publish

logger = logging.getLogger(__name__)
DECISION_WAIT_S = 5.0


def workspace_create(*, owner: User) -> Workspace:
    """A new empty workspace of `owner`'s, with its folder."""
    workspace = Workspace.objects.create(owner=owner)
    workspace.root.mkdir(parents=True, exist_ok=True)
    return workspace


def workspace_for_query(query: Query) -> Workspace:
    """The query's workspace (a new one on first use, with its folder)."""
    use = WorkspaceUse.objects.select_related("workspace").filter(query=query).first()
    if use is None:
        with transaction.atomic():
            workspace = Workspace.objects.create(owner_id=query.owner_id)
            use, _ = WorkspaceUse.objects.get_or_create(
                query=query, defaults={"workspace": workspace}
            )
        if use.workspace_id != workspace.pk:  # another request linked one first: use that
            workspace.delete()
            use = WorkspaceUse.objects.select_related("workspace").get(query=query)
    use.workspace.root.mkdir(parents=True, exist_ok=True)
    return use.workspace


def workspace_attach(*, query: Query, workspace: Workspace) -> None:
    """Make `query` work in `workspace` (the same owner's; checked by the caller's selector).
    A query that already has a workspace keeps it: a run may have changed it already."""
    if workspace.owner_id != query.owner_id:
        raise PermissionError("a query works only in its owner's workspace")
    WorkspaceUse.objects.get_or_create(query=query, defaults={"workspace": workspace})


def workspace_fs(workspace: Workspace) -> FsWorkspace:
    return FsWorkspace(workspace.root, workspace.state_dir)


def workspace_set_server_folder(*, workspace: Workspace, folder: str) -> Workspace:
    """Single-user installs: use one of UNDOABLE_WORKSPACE_SERVER_FOLDERS as the workspace
    itself."""
    allowed = [str(Path(f).resolve()) for f in settings.UNDOABLE_WORKSPACE_SERVER_FOLDERS]
    if folder and str(Path(folder).resolve()) not in allowed:
        raise InvalidSpec("that folder is not one the server allows")
    workspace.server_folder = folder
    workspace.save(update_fields=["server_folder"])
    return workspace


def workspace_upload(*, workspace: Workspace, files: list[UploadedFile]) -> list[str]:
    """Add files (a .zip is unpacked) to the workspace, all or nothing; the paths written.

    Refused while a change is open. InvalidSpec (a message for the person) when any entry of
    any upload is refused or cannot be written; the workspace is then exactly as before."""
    fs = workspace_fs(workspace)
    with fs.locked():
        if fs.pending() is not None:
            raise WorkspaceBusy("keep or discard the pending change before uploading")
        written = uploads.upload_into(workspace.root, workspace.state_dir, files)
    logger.info("workspace upload", extra={"workspace": workspace.pk, "files": len(written)})
    return written


def workspace_zip(*, workspace: Workspace) -> bytes:
    """The workspace as a zip: every file and folder, modes kept, links stored as links."""
    buffer = io.BytesIO()
    root = workspace.root
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames) + [
                d for d in dirnames if os.path.islink(Path(dirpath, d))
            ]:
                path = Path(dirpath, name)
                st = path.lstat()
                info = zipfile.ZipInfo(str(path.relative_to(root)))
                info.external_attr = (st.st_mode & 0xFFFF) << 16
                if stat.S_ISLNK(st.st_mode):
                    archive.writestr(info, os.readlink(path))
                elif stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as f:
                        archive.writestr(info, f.read())
    return buffer.getvalue()


def workspace_tar(*, workspace: Workspace) -> bytes:
    """The workspace as a gzipped tar: files and folders with their modes, a link stored as a
    link (never followed). `undoable do --dir` applies a kept change from it."""
    buffer = io.BytesIO()
    root = workspace.root
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath, name)
                archive.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buffer.getvalue()


def change_keep(*, change: PendingChange) -> PendingChange:
    """Keep: apply an fs change now, or ask the db run's relay to commit."""
    return _decide(change, keep=True)


def change_discard(*, change: PendingChange) -> PendingChange:
    """Discard: throw an fs change away now, or ask the db run's relay to roll back."""
    return _decide(change, keep=False)


def _decide(change: PendingChange, *, keep: bool) -> PendingChange:
    if change.kind == "db":
        wanted = ChangeStatus.KEEP_REQUESTED if keep else ChangeStatus.DISCARD_REQUESTED
        if not lifecycle.change_move(
            change, wanted, from_=[ChangeStatus.PENDING], updated_at=timezone.now()
        ):
            raise NothingPending("this transaction is not waiting for a decision any more")
        change_publish(change)
        # In this process (the embedded runner) the holder answers at once: show its result.
        decisions.decision_made(change.pk, wait_s=DECISION_WAIT_S)
        change.refresh_from_db()
        return change
    if change.status != ChangeStatus.PENDING:
        raise NothingPending("this change is not waiting for a decision any more")
    fs = workspace_fs(workspace_for_query(change.run.query))
    pending = fs.pending()
    if pending is None or pending.run_id != str(change.run_id):
        raise NothingPending("this change is not waiting for a decision any more")
    if keep:
        uid = executor_get().sandbox_host_uid
        change.changes = [c.as_dict() for c in pending.keep(owner_uid=uid)]
        if change.run.direction == RunDirection.REVERSE:
            change.undo_check = _reverse_check(fs, change)
        change_set(
            change, ChangeStatus.KEPT, "Applied to the workspace.", from_=[ChangeStatus.PENDING]
        )
    else:
        change.undo_check = pending.undo().as_json()
        message = "Discarded; the workspace is as before."
        change_set(change, ChangeStatus.DISCARDED, message, from_=[ChangeStatus.PENDING])
    return change


def _reverse_check(fs: FsWorkspace, change: PendingChange) -> dict[str, object] | None:
    """What a kept reverse program left different from the workspace the forward run before
    it began from (fs_reverse_check; a report, not an alarm)."""
    reverse = change.run
    forward = (
        Run.objects.filter(
            query_id=reverse.query_id,
            direction=RunDirection.FORWARD,
            created_at__lt=reverse.created_at,
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if forward is None:
        return None
    return fs_reverse_check(fs, forward_run_id=str(forward.pk))


def change_set(
    change: PendingChange,
    status: str,
    message: str,
    *,
    timed_out: bool = False,
    from_: Collection[str] | None = None,
) -> bool:
    """Record how a run's change ended (or that it awaits a choice), and tell its page; only
    if it is in a state it may move to `status` from (`from_` narrows those: webapp.lifecycle).
    False, with `change` read again, when another writer moved it first: that state stands."""
    if not lifecycle.change_move(
        change,
        status,
        from_=from_,
        message=message,
        timed_out=timed_out,
        updated_at=timezone.now(),
        changes=change.changes,
        deadline=change.deadline,
        undo_check=change.undo_check,
    ):
        change.refresh_from_db()
        logger.warning(
            "change already moved elsewhere; this outcome is dropped",
            extra={"change_id": change.pk, "status": change.status, "dropped_status": status},
        )
        return False
    logger.info(
        "change settled",
        extra={"run_id": change.run_id, "change_id": change.pk, "status": status},
    )
    change_publish(change)
    audit_change(change=change)
    if status == ChangeStatus.KEPT and change.run.direction == RunDirection.REVERSE:
        _forward_reversed(change)
    return True


def _forward_reversed(undo: PendingChange) -> None:
    """Undo's reverse program was kept: the kept forward change before it is now `reversed`
    (conditional on its still being kept, so it is marked once)."""
    forward = (
        PendingChange.objects.filter(
            run__query_id=undo.run.query_id,
            run__direction=RunDirection.FORWARD,
            status=ChangeStatus.KEPT,
            created_at__lte=undo.created_at,
        )
        .exclude(pk=undo.pk)
        .order_by("-created_at", "-id")
        .first()
    )
    if forward is None:
        return
    message = f"Undo: run #{undo.run_id} ran the reverse program and its change was kept."
    if lifecycle.change_move(
        forward, ChangeStatus.REVERSED, message=message, updated_at=timezone.now()
    ):
        change_publish(forward)


def change_settle(
    *,
    change_id: int,
    status: str,
    message: str,
    timed_out: bool = False,
    from_: Collection[str] | None = None,
    undo_check: dict[str, object] | None = None,
) -> None:
    """The db holder's last word on its change (with a rollback's verification, when there is
    one); nothing if the row is gone (run deleted)."""
    change = PendingChange.objects.filter(pk=change_id).first()
    if change is not None:
        if undo_check is not None:
            change.undo_check = undo_check
        change_set(change, status, message, timed_out=timed_out, from_=from_)


def change_publish(change: PendingChange) -> None:
    """`change.updated` to the run's websocket group, and `waiting.moved` to its owner's
    pages, once the write is committed."""
    event = ChangeUpdatedEvent(
        type="change.updated",
        change=ChangePayload(
            type="change",
            change_id=change.pk,
            run_id=change.run_id,
            status=change.status,
            message=change.message,
        ),
    )
    run_id = change.run_id
    transaction.on_commit(lambda: publish_run_event(run_id, event))
    # Every status a change moves to goes through here: the owner's header count follows.
    owner_id = Query.objects.filter(runs__pk=run_id).values_list("owner_id", flat=True).first()
    if owner_id is not None:
        waiting_publish(owner_id=owner_id)


def query_regenerate_reverse(*, query: Query, forward_run: Run, forward_output: str) -> Query:
    """Ask the LLM for reverse code again, now that the forward code's real output is known."""
    prompt = (
        f"{query.prompt}\n\nThis forward code already ran:\n```\n{forward_run.code}\n```\n"
        f"Its actual output was:\n```\n{forward_output[-8000:]}\n```\n"
        "Write reverse code that undoes exactly what it did. The reverse code receives that "
        "output in the FORWARD_OUTPUT environment variable (also in the file "
        "forward_output.txt); use the ids it contains."
    )
    proposal = llm.propose_action(
        prompt=prompt, kind=query.kind, credential_names=query.credential_names
    )
    query.reverse_code = proposal.reverse_code
    query.save(update_fields=["reverse_code", "updated_at"])
    return query
