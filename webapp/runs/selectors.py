"""Reads of runs, scoped by owner: a run named in a URL is loaded here, or the request gets
a 404."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.http import Http404

from webapp.queries.models import Query
from webapp.runs.models import Run, RunChunk


def get_run_for_user(user: User | AnonymousUser, run_id: int) -> Run:
    """The user's own run (through its query's owner), or Http404."""
    if not user.is_authenticated:
        raise Http404("No such run")
    try:
        return Run.objects.select_related("query").get(pk=run_id, query__owner=user)
    except Run.DoesNotExist:
        raise Http404("No such run") from None


def run_list_for_query(query: Query, *, limit: int = 20) -> list[Run]:
    return list(query.runs.order_by("-created_at", "-id")[:limit])


def run_chunks_after(run_id: int, after_seq: int) -> QuerySet[RunChunk]:
    return RunChunk.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")


def run_output_text(run: Run, *, max_chars: int = 20_000) -> str:
    """The stored (already masked) output of a run, its tail if long."""
    text = "".join(run_chunks_after(run.pk, 0).values_list("text", flat=True))
    return text[-max_chars:]


def run_last_seq(run_id: int) -> int:
    last = RunChunk.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", flat=True)
    return last.first() or 0
