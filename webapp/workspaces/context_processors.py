"""The count of changes waiting for Keep or Discard, in the header of every page, so a change
left in another query or tab is not forgotten. (Here rather than in accounts: accounts is
imported by the apps whose models this reads.)"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from webapp.workspaces.selectors import changes_waiting_for_user


def changes_waiting(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)  # the API's requests have no session user
    if user is None:
        return {}
    waiting = changes_waiting_for_user(user)
    if len(waiting) == 1:
        # One change: straight to it on its query's page.
        query_id = waiting[0].run.query_id
        url = reverse("queries:query-detail", args=[query_id]) + "#pending-change"
    else:
        url = reverse("history:list") + "?waiting=1"
    return {"changes_waiting": {"count": len(waiting), "url": url}}
