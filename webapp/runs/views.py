"""The run calls of the query page, and the page's runs section. Thin: access helper ->
body -> service -> response."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp import llm
from webapp.executor_glue import BackendUnavailable, executor_get, executor_problem
from webapp.json_body import BadJsonBody, bad_json_body_response, json_body_model
from webapp.queries import services as query_services
from webapp.queries.models import Query
from webapp.queries.selectors import get_query_for_user
from webapp.runs import services
from webapp.runs.forms import RunBody
from webapp.runs.images import get_run_image, image_response
from webapp.runs.models import RunDirection
from webapp.runs.run_backends import runner_backend
from webapp.runs.selectors import get_run_for_user, run_list_for_query
from webapp.runs.status import run_failure, status_payload

logger = logging.getLogger(__name__)


def _sandbox_problem() -> str | None:
    """Why nothing can run, if the sandbox refused to start (embedded mode runs it here)."""
    if runner_backend().out_of_process:
        return executor_problem()
    try:
        executor_get()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def query_page_runs(request: HttpRequest, query: Query) -> dict[str, Any]:
    """The query page's runs section: its latest runs, the Run buttons' needs, the console."""
    runs = run_list_for_query(query)
    latest = runs[0] if runs else None
    return {
        "runs": runs,
        "latest": latest,
        "latest_failure": run_failure(latest) if latest else None,
        "executor_problem": _sandbox_problem(),
        "confirm_phrase": services.CONFIRM_PHRASE,
        # History's Re-run of an action outside the sandbox lands here instead of running.
        "rerun_requested": request.GET.get("rerun") == "1",
        "page_data": {
            "runUrl": reverse("runs:run-create", args=[query.pk]),
            "runListUrl": reverse("runs:run-list", args=[query.pk]),
            "confirmPhrase": services.CONFIRM_PHRASE,
            "latestRun": status_payload(latest) if latest else None,
            "latestRunUrl": reverse("runs:run-detail", args=[latest.pk]) if latest else None,
        },
    }


@login_required
@require_POST
def run_create(request: HttpRequest, query_id: int) -> JsonResponse:
    """Save the editors, then start a run of one of them (the run snapshots the saved code)."""
    query = get_query_for_user(request.user, query_id)
    try:
        body = json_body_model(request, RunBody)
    except BadJsonBody as exc:
        return bad_json_body_response(exc)
    query = query_services.query_update(
        query=query,
        forward_code=body.forward_code,
        reverse_code=body.reverse_code,
        credential_names=body.credential_names,
    )
    try:
        run = services.query_run(
            query=query,
            direction=RunDirection(body.direction),
            credentials=body.credentials,
            confirm=body.confirm,
            grants=body.grants,
        )
    except services.ConfirmationRequired as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except services.CredentialsMissing as exc:
        return JsonResponse({"error": str(exc), "missing_credentials": exc.names}, status=400)
    return JsonResponse(
        {
            "run": status_payload(run),
            "ws_path": f"/ws/runs/{run.pk}/",
            "cancel_url": reverse("runs:run-cancel", args=[run.pk]),
            "fix_url": reverse("runs:run-fix", args=[run.pk]),
        },
        status=201,
    )


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> JsonResponse:
    run = services.run_cancel(run=get_run_for_user(request.user, run_id))
    return JsonResponse({"run": status_payload(run)})


@login_required
@require_POST
def run_fix(request: HttpRequest, run_id: int) -> JsonResponse:
    run = get_run_for_user(request.user, run_id)
    try:
        fix = services.run_apply_fix(run=run)
    except llm.LLMError as exc:
        return JsonResponse({"error": str(exc)}, status=502)
    return JsonResponse({"code": fix.code, "explanation": fix.explanation, "previous": run.code})


@login_required
@require_GET
def run_list(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    return render(request, "runs/_run_list.html", {"runs": run_list_for_query(query)})


@login_required
@require_GET
def run_detail(request: HttpRequest, run_id: int) -> JsonResponse:
    run = get_run_for_user(request.user, run_id)
    return JsonResponse(
        {
            "run": status_payload(run),
            "code": run.code,
            "direction": run.direction,
            "ws_path": f"/ws/runs/{run.pk}/",
            "cancel_url": reverse("runs:run-cancel", args=[run.pk]),
            "fix_url": reverse("runs:run-fix", args=[run.pk]),
        }
    )


@login_required
@require_GET
def run_image(request: HttpRequest, run_id: int, position: int) -> HttpResponse:
    """One image of the user's own run (a run's images never change once stored)."""
    image = get_run_image(get_run_for_user(request.user, run_id), position)
    return image_response(image, cache_control="private, max-age=86400")
