"""History actions that are not already query services."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import transaction

from webapp.queries.models import Query
from webapp.runs.models import FINAL_STATUSES
from webapp.runs.services import run_cancel
from webapp.workspaces import decisions
from webapp.workspaces.models import OPEN_STATUSES, PendingChange, Workspace
from webapp.workspaces.removal import WorkspaceFiles, workspace_files, workspace_files_remove

logger = logging.getLogger(__name__)
HOLDER_WAIT_S = 5.0


def query_delete(*, query: Query) -> None:
    """Delete a query with its runs and share links; stop its runs that are still going first.

    Once the delete is committed (never if it rolls back), its workspace's folders, state and
    pending copy leave the disk, and a db transaction it held is rolled back."""
    for run in query.runs.exclude(status__in=FINAL_STATUSES):
        run_cancel(run=run)
    query_id = query.pk
    # The workspace goes with its only query; one other queries (or actions) share stays.
    workspace = Workspace.objects.filter(uses__query=query).first()
    if workspace is not None and workspace.uses.exclude(query=query).exists():
        workspace = None
    files = workspace_files(workspace) if workspace is not None else None
    held = list(
        PendingChange.objects.filter(
            run__query=query, kind="db", status__in=OPEN_STATUSES
        ).values_list("pk", flat=True)
    )
    query.delete()
    if workspace is not None:
        workspace.delete()
    _after_commit(lambda: _release(files, held))
    logger.info("query deleted", extra={"query_id": query_id})


def _after_commit(work: Callable[[], None]) -> None:
    transaction.on_commit(work)


def _release(files: WorkspaceFiles | None, held: list[int]) -> None:
    # A db holder in this process finds its change gone and rolls back now, releasing its
    # reservation; one in another process notices within its polling interval.
    for change_id in held:
        decisions.decision_made(change_id, wait_s=HOLDER_WAIT_S)
    if files is not None:
        workspace_files_remove(files)
