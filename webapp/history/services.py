"""History actions that are not already query services."""

from __future__ import annotations

import logging

from webapp.queries.models import FINAL_STATUSES, Query
from webapp.queries.services import run_cancel

logger = logging.getLogger(__name__)


def query_delete(*, query: Query) -> None:
    """Delete a query with its runs and share links; stop its runs that are still going first."""
    for run in query.runs.exclude(status__in=FINAL_STATUSES):
        run_cancel(run=run)
    query_id = query.pk
    query.delete()
    logger.info("query deleted", extra={"query_id": query_id})
