"""Changes nobody will settle any more, because the worker that held them is gone.

A worker killed mid-run leaves its change `running` (its run is reaped "Worker lost"), and one
killed while holding a db transaction leaves it open past its deadline (PostgreSQL rolled it
back when the connection dropped; a SQLite copy was never installed). Either way the workspace
stays reserved and every later run would fail "in use". This pass ends such changes and frees
their workspaces. Updates are conditional on the state that was read, like the run reaper's.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.utils import timezone

from webapp import lifecycle
from webapp.audit.services import audit_change
from webapp.executor_glue import NothingPending, Reservation
from webapp.runs.models import RunStatus
from webapp.workspaces.models import OPEN_STATUSES, ChangeStatus, PendingChange
from webapp.workspaces.services import change_set, workspace_for_query, workspace_fs

logger = logging.getLogger(__name__)

HOLDER_GRACE_S = 30
HOLDER_LOST = "The worker holding this change stopped; nothing was applied (rolled back)."
_FINAL_RUNS = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED)


def changes_reap(*, now: dt.datetime | None = None) -> list[int]:
    """End orphaned changes and free their workspaces; return the ids that were ended."""
    now = now or timezone.now()
    before = now - dt.timedelta(seconds=HOLDER_GRACE_S)
    orphaned = PendingChange.objects.filter(
        status=ChangeStatus.RUNNING, run__status__in=_FINAL_RUNS, run__finished_at__lt=before
    ) | PendingChange.objects.filter(kind="db", status__in=OPEN_STATUSES, deadline__lt=before)
    ended = []
    for change in orphaned.select_related("run__query"):
        # A change still `running` never became a choice (its run ended without settling it);
        # one that waited for a decision is thrown away, with the reason.
        ended_as = (
            ChangeStatus.FAILED if change.status == ChangeStatus.RUNNING else ChangeStatus.DISCARDED
        )
        was = change.status
        if not lifecycle.change_move(
            change, ended_as, from_=[was], message=HOLDER_LOST, updated_at=now
        ):
            continue
        audit_change(change=change)
        # Whatever the run left in the workspace's pending state (a copy or a reservation)
        # goes; a newer run's is left alone (release() checks the run id).
        workspace = workspace_fs(workspace_for_query(change.run.query))
        Reservation(workspace, str(change.run_id)).release()
        logger.warning("orphaned change ended", extra={"change_id": change.pk, "was": was})
        ended.append(change.pk)
    return ended


FS_TIMEOUT_REASON = (
    "Discarded automatically: nobody chose Keep or Discard in time (the workspace is as before)."
)


def fs_pending_expire(*, now: dt.datetime | None = None) -> list[int]:
    """Discard fs changes left pending past UNDOABLE_FS_PENDING_TIMEOUT_S, and say so.

    The workspace's lock decides against a Keep or Discard at the same moment: whichever runs
    first wins, the other finds nothing pending (NothingPending) and changes nothing."""
    now = now or timezone.now()
    before = now - dt.timedelta(seconds=settings.UNDOABLE_FS_PENDING_TIMEOUT_S)
    stale = PendingChange.objects.filter(
        kind="fs", status=ChangeStatus.PENDING, updated_at__lt=before
    ).select_related("run__query")
    ended = []
    for change in stale:
        pending = workspace_fs(workspace_for_query(change.run.query)).pending()
        if pending is None or pending.run_id != str(change.run_id):
            continue
        try:
            pending.undo()
        except NothingPending:
            continue  # decided meanwhile: that decision stands
        change_set(
            change,
            ChangeStatus.DISCARDED,
            FS_TIMEOUT_REASON,
            timed_out=True,
            from_=[ChangeStatus.PENDING],
        )
        logger.info("pending fs change timed out", extra={"change_id": change.pk})
        ended.append(change.pk)
    return ended
