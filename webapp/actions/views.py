"""The Review page: the actions the person's agents made (and every change of theirs waiting),
those waiting first. Keep and Discard post to the query page's own views
(webapp.workspaces.views); the reverse program runs on the action's query page, which asks this
browser for the credentials it needs."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.actions.selectors import review_inbox_for_user


@login_required
@require_GET
def review_inbox(request: HttpRequest) -> HttpResponse:
    items = review_inbox_for_user(request.user)  # type: ignore[arg-type]
    return render(request, "actions/review.html", {"items": items})


@login_required
@require_GET
def review_list(request: HttpRequest) -> HttpResponse:
    """The list alone: the page fetches it again when its count of changes waiting moves."""
    items = review_inbox_for_user(request.user)  # type: ignore[arg-type]
    return render(request, "actions/_review_list.html", {"items": items})
