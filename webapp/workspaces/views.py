"""The workspace panel of the query page: files, allowed hosts, the change list, Keep/Discard."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST

from webapp import llm
from webapp.body_caps import body_cap
from webapp.executor_glue import ExecutorError
from webapp.queries import services as query_services
from webapp.queries.models import Query
from webapp.queries.selectors import get_query_for_user
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.workspaces import services, uploads
from webapp.workspaces.models import PendingChange
from webapp.workspaces.runs import forward_output
from webapp.workspaces.selectors import get_change_for_user, workspace_panel_for_query

logger = logging.getLogger(__name__)


# Where a plain Keep/Discard form post may return to, by name: never a URL from the request.
BACK_TO = {"review": "actions:review"}


def _back(query_id: int, back: str = "") -> HttpResponse:
    if back in BACK_TO:
        return redirect(BACK_TO[back])
    return redirect("queries:query-detail", query_id=query_id)


@login_required
@require_GET
def panel(request: HttpRequest, query_id: int) -> HttpResponse:
    """The panel's body; the page fetches it again when its run socket reports a change."""
    query = get_query_for_user(request.user, query_id)
    return render(request, "workspaces/panel_body.html", _panel_context(query))


def _panel_context(query: Query) -> dict[str, Any]:
    return {"query": query, **workspace_panel_for_query(query)}


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _decided(request: HttpRequest, change: PendingChange, error: str) -> HttpResponse:
    """The page's fetch gets the panel as it now stands (and the error, if any); a plain form
    post goes back to the page with the error as a message."""
    query = change.run.query
    if not _wants_json(request):
        if error:
            messages.error(request, error)
        return _back(query.pk, request.POST.get("back", ""))
    change.refresh_from_db()
    html = render_to_string("workspaces/panel_body.html", _panel_context(query), request=request)
    return JsonResponse(
        {"change_id": change.pk, "status": change.status, "error": error, "panel": html},
        status=409 if error else 200,
    )


@body_cap(lambda: uploads.MAX_UPLOAD_REQUEST_BYTES)
@login_required
@require_POST
def upload(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    files = request.FILES.getlist("files")
    try:
        names = services.workspace_upload(
            workspace=services.workspace_for_query(query), files=files
        )
        messages.success(request, f"Uploaded {len(names)} file(s) to the workspace.")
    except (ExecutorError, ValueError) as exc:
        messages.error(request, f"Upload refused: {exc}")
    return _back(query.pk)


@login_required
@require_GET
def download(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    data = services.workspace_zip(workspace=services.workspace_for_query(query))
    response = HttpResponse(data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="workspace-{query.pk}.zip"'
    return response


@login_required
@require_POST
def hosts(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    raw = request.POST.get("hosts", "")
    names = [h.strip() for h in raw.replace(",", "\n").splitlines() if h.strip()]
    query_services.query_update(query=query, hosts=names[:50])
    messages.success(request, "Allowed hosts saved.")
    return _back(query.pk)


@login_required
@require_POST
def change_keep(request: HttpRequest, change_id: int) -> HttpResponse:
    change = get_change_for_user(request.user, change_id)
    try:
        services.change_keep(change=change)
    except ExecutorError as exc:
        return _decided(request, change, f"Keep failed: {exc}")
    return _decided(request, change, "")


@login_required
@require_POST
def change_discard(request: HttpRequest, change_id: int) -> HttpResponse:
    change = get_change_for_user(request.user, change_id)
    try:
        services.change_discard(change=change)
    except ExecutorError as exc:
        return _decided(request, change, f"Discard failed: {exc}")
    return _decided(request, change, "")


@login_required
@require_POST
def regenerate_reverse(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    latest = Run.objects.filter(
        query=query, direction=RunDirection.FORWARD, status=RunStatus.SUCCEEDED
    ).first()
    if latest is None:
        messages.error(request, "Run the forward code successfully first.")
        return _back(query.pk)
    try:
        services.query_regenerate_reverse(
            query=query, forward_run=latest, forward_output=forward_output(latest)
        )
        messages.success(request, "Reverse code regenerated from the forward run's output.")
    except llm.LLMError as exc:
        messages.error(request, str(exc))
    return _back(query.pk)
