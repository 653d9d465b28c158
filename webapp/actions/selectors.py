"""Reads of actions, scoped to their owner: another user's action is a 404."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.http import Http404

from webapp.actions.output import action_json
from webapp.queries.models import Query
from webapp.runs.models import RunDirection

MAX_LISTED = 100


def get_action_for_user(user: User | AnonymousUser, action_id: int) -> Query:
    """The user's own query that ran (an action, made here or in the browser), or Http404."""
    if not user.is_authenticated:
        raise Http404("No such action")
    found = Query.objects.filter(
        pk=action_id, owner=user, runs__direction=RunDirection.FORWARD
    ).first()
    if found is None:
        raise Http404("No such action")
    return found


def action_list_for_user(
    user: User, *, status: str | None = None, kind: str | None = None, token: str | None = None
) -> list[dict[str, Any]]:
    """The user's latest actions (newest first), filtered by status, kind and the prefix of
    the token that made them."""
    queries = Query.objects.filter(owner=user, runs__direction=RunDirection.FORWARD).distinct()
    if kind:
        queries = queries.filter(kind=kind)
    if token:
        queries = queries.filter(action__token__prefix=token)
    found = [action_json(query) for query in queries.order_by("-created_at", "-id")[:MAX_LISTED]]
    return [action for action in found if status is None or action["status"] == status]
