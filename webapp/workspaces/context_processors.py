"""The count of changes waiting for Keep or Discard, in the header of every page, so a change
left in another query or tab is not forgotten. (Here rather than in accounts: accounts is
imported by the apps whose models this reads.)"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from webapp.workspaces.selectors import changes_waiting_summary


def changes_waiting(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)  # the API's requests have no session user
    if user is None:
        return {}
    summary = changes_waiting_summary(user)
    return {"changes_waiting": {"count": summary["count"], "url": summary["url"]}}
