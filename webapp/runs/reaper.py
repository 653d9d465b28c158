"""End runs that nobody is executing any more, within a bounded time.

A worker touches `Run.heartbeat_at` every few seconds while a run is `running`
(webapp.runs.execution). When a worker is killed (`kill -9`, OOM, machine lost) the heartbeat
stops; every live worker runs this reaper, which ends such runs `failed` with "Worker lost"
once the heartbeat is UNDOABLE_RUN_LOST_AFTER_S old (webapp.reliability.reaper's thread calls it).
Updates are conditional on the state that was read, so several reapers (one per worker) never
fight, and a worker that comes back to life cannot be overwritten by a stale decision.

Bound: a killed worker's run is final within UNDOABLE_RUN_LOST_AFTER_S + UNDOABLE_REAPER_INTERVAL_S.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp import lifecycle
from webapp.audit.services import audit_run_end
from webapp.reliability import conf
from webapp.runs.models import Run, RunStatus
from webapp.runs.publish import publish_run_event
from webapp.runs.status import status_event

logger = logging.getLogger(__name__)

WORKER_LOST = "Worker lost: the worker running this stopped answering; the run was abandoned."
NEVER_STARTED = "Never started: no worker took this run in time."


def runs_reap(*, now: dt.datetime | None = None) -> list[int]:
    """Fail lost runs (stale heartbeat) and stale queued ones; return the ids that were ended."""
    now = now or timezone.now()
    lost_before = now - dt.timedelta(seconds=conf.seconds("UNDOABLE_RUN_LOST_AFTER_S"))
    queued_before = now - dt.timedelta(seconds=conf.seconds("UNDOABLE_RUN_QUEUED_TIMEOUT_S"))
    lost = (
        Run.objects.filter(status=RunStatus.RUNNING)
        .annotate(last_sign=Coalesce("heartbeat_at", "started_at", "created_at"))
        .filter(last_sign__lt=lost_before)
    )
    ended = [
        run_id
        for run_id in lost.values_list("pk", flat=True)
        if _end(run_id, RunStatus.RUNNING, WORKER_LOST, now, stale_before=lost_before)
    ]
    never = Run.objects.filter(status=RunStatus.QUEUED, created_at__lt=queued_before)
    ended += [
        run_id
        for run_id in never.values_list("pk", flat=True)
        if _end(run_id, RunStatus.QUEUED, NEVER_STARTED, now, stale_before=None)
    ]
    return ended


def _end(
    run_id: int, expected: str, error: str, now: dt.datetime, *, stale_before: dt.datetime | None
) -> bool:
    still = None
    if stale_before is not None:
        # Re-check the heartbeat in the UPDATE itself: a beat that landed since we looked wins.
        still = Q(heartbeat_at__lt=stale_before) | Q(heartbeat_at__isnull=True)
    with transaction.atomic():
        if not lifecycle.run_move(
            run_id, RunStatus.FAILED, from_=[expected], where=still, error=error, finished_at=now
        ):
            return False
        run = Run.objects.select_related("query").get(pk=run_id)
        if run.started_at is None:
            Run.objects.filter(pk=run_id).update(started_at=now)
            run.started_at = now
        audit_run_end(run=run)
    logger.warning(
        "run reaped", extra={"run_id": run_id, "was": expected, "worker": run.worker or None}
    )
    publish_run_event(run_id, status_event(run))
    return True
