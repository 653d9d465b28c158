"""The history list: a person's queries, newest first, with the status of each one's last run
and of its last change (waiting for Keep or Discard, kept, discarded, failed)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.workspaces.models import ChangeStatus, PendingChange


def history_list_for_user(
    user: User, *, search: str = "", waiting: bool = False
) -> QuerySet[Query]:
    """The user's queries, searched across prompt and both codes; with `waiting`, only those
    with a change waiting for Keep or Discard (where the header's count links).

    The last run's status and time come from correlated subqueries, so one SQL query serves a
    page however many rows it holds.
    """
    last_run = Run.objects.filter(query=OuterRef("pk")).order_by("-created_at", "-id")
    changes = PendingChange.objects.filter(run__query=OuterRef("pk"))
    queries = Query.objects.filter(owner=user).annotate(
        last_run_status=Subquery(last_run.values("status")[:1]),
        last_run_at=Subquery(last_run.values("created_at")[:1]),
        last_change_status=Subquery(changes.order_by("-created_at", "-id").values("status")[:1]),
        has_waiting=Exists(changes.filter(status=ChangeStatus.PENDING)),
    )
    if waiting:
        queries = queries.filter(has_waiting=True)
    term = search.strip()
    if term:
        queries = queries.filter(
            Q(prompt__icontains=term)
            | Q(forward_code__icontains=term)
            | Q(reverse_code__icontains=term)
        )
    return queries.order_by("-created_at", "-id")
