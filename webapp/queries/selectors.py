"""Reads scoped by owner. Anything named in a URL is loaded here, or the request gets a 404."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.http import Http404

from webapp.queries.models import Query


def get_query_for_user(user: User | AnonymousUser, query_id: int) -> Query:
    """The user's own query, or Http404 (also for anonymous users and other people's queries)."""
    if not user.is_authenticated:
        raise Http404("No such query")
    try:
        return Query.objects.get(pk=query_id, owner=user)
    except Query.DoesNotExist:
        raise Http404("No such query") from None
