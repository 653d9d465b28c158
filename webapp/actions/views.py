"""The Review page: the actions the person's agents made (and every change of theirs waiting),
those waiting first. Keep and Discard of a change post to the query page's own views
(webapp.workspaces.views); a rest action's Keep, which the query page has not, posts here. The
reverse program runs on the action's query page, which asks this
browser for the credentials it needs."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.actions import rehearsal_jobs, rehearsals, services
from webapp.actions.selectors import get_action_for_user, review_inbox_for_user
from webapp.queries.selectors import get_query_for_user


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


@login_required
@require_POST
def query_rehearse(request: HttpRequest, query_id: int) -> HttpResponse:
    """The query page's Rehearse: its saved code on a throwaway copy, in the background
    (webapp.actions.rehearsal_jobs), with the credentials this browser holds for it (for this
    job only). Answers at once: 202 and the job's state (query_rehearsal's), or {"error"}."""
    query = get_query_for_user(request.user, query_id)
    try:
        body = json.loads(request.body or b"{}")
        credentials = body.get("credentials") or {}
        if not isinstance(credentials, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in credentials.items()
        ):
            raise ValueError
    except (ValueError, AttributeError):
        return JsonResponse({"error": 'the body is {"credentials": {"NAME": "value"}}'}, status=400)
    try:
        state = rehearsal_jobs.rehearsal_submit(query=query, credentials=credentials)
    except rehearsals.RehearsalRefused as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    return JsonResponse(state, status=202)


@login_required
@require_GET
def query_rehearsal(request: HttpRequest, query_id: int) -> HttpResponse:
    """The state of the query page's rehearsal, which the page polls while it says
    "rehearsing": {"state": "rehearsing" | "failed" | "done" | "none", "error", "verdict"}."""
    query = get_query_for_user(request.user, query_id)
    return JsonResponse(rehearsal_jobs.rehearsal_state(query))
