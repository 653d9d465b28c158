"""A rest action's expiry, written once: the reaper's pass finds rest actions past their
deadline that nobody kept or undid, and the winner of each one's move
(`lifecycle.rest_action_expire`) appends its `timeout` entry to the ledger in the same
transaction, so two reapers racing over one action leave one entry.

Nothing else happens at expiry (the effect already stands, Undo stays open); the state the API
shows is still read from the deadline (webapp.actions.state), so it says `expired` on time even
when no reaper ran yet.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Subquery
from django.utils import timezone

from webapp import lifecycle
from webapp.actions.state import EXPIRED_REASON, action_state, rest_deadline
from webapp.audit.models import AuditEvent
from webapp.audit.services import audit_query
from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection, RunStatus

logger = logging.getLogger(__name__)


def _candidates(now: dt.datetime) -> list[Query]:
    """Rest queries whose latest forward run succeeded before the cutoff, not undone since and
    not ended by a Keep, a revocation or an expiry (their state is read once more to be sure)."""
    cutoff = now - dt.timedelta(seconds=settings.UNDOABLE_REST_PENDING_TIMEOUT_S)
    latest = Run.objects.filter(query=OuterRef("pk"), direction=RunDirection.FORWARD).order_by(
        "-created_at", "-id"
    )
    undone = Run.objects.filter(
        query=OuterRef("pk"),
        direction=RunDirection.REVERSE,
        created_at__gte=OuterRef("forward_at"),
    )
    return list(
        Query.objects.filter(kind="rest")
        .annotate(
            forward_at=Subquery(latest.values("created_at")[:1]),
            forward_status=Subquery(latest.values("status")[:1]),
            forward_finished_at=Subquery(latest.values("finished_at")[:1]),
        )
        .filter(forward_status=RunStatus.SUCCEEDED, forward_finished_at__lt=cutoff)
        .exclude(Exists(undone))
        .exclude(action__kept_at__isnull=False)
        .exclude(action__token_revoked_at__isnull=False)
        .exclude(action__expired_at__isnull=False)
        .select_related("owner")
    )


def rest_actions_expire(*, now: dt.datetime | None = None) -> list[int]:
    """Record the expiry of every rest action past its deadline (see the module's text);
    return the query ids this pass recorded."""
    now = now or timezone.now()
    expired = []
    for query in _candidates(now):
        state = action_state(query)
        if state.status != "expired" or state.forward is None:
            continue
        with transaction.atomic():
            if not lifecycle.rest_action_expire(
                query.pk, owner_id=query.owner_id, now=now, deadline=rest_deadline(state.forward)
            ):
                continue
            audit_query(
                event=AuditEvent.TIMEOUT,
                query=query,
                target=f"action {query.pk}",
                outcome=f"expired: {EXPIRED_REASON}",
            )
        logger.info("rest action expired", extra={"query_id": query.pk})
        expired.append(query.pk)
    return expired
