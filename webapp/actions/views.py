"""The Review page: the actions the person's agents made (and every change of theirs waiting),
those waiting first. Keep and Discard of a change post to the query page's own views
(webapp.workspaces.views); a rest action's Keep, which the query page has not, posts here. The
reverse program runs on the action's query page, which asks this
browser for the credentials it needs."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.actions import services
from webapp.actions.selectors import get_action_for_user, review_inbox_for_user


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


@login_required
@require_POST
def review_keep(request: HttpRequest, query_id: int) -> HttpResponse:
    """The owner's Keep of a pending action (a rest action's effect stands): the one Keep a
    review-required token's action takes. The page's fetch gets {"error"}; a form goes back."""
    query = get_action_for_user(request.user, query_id)
    status, error = 200, ""
    try:
        services.action_keep_reviewed(query=query)
    except services.ActionRefused as exc:
        status, error = exc.status, exc.message
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse({"error": error}, status=status)
    if error:
        messages.error(request, error)
    return redirect("actions:review")
