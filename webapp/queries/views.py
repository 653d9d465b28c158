"""Pages and the page's JSON calls. Thin: access helper -> form/body -> service -> response."""

from __future__ import annotations

import logging
from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from pydantic import ValidationError

from executor import BackendUnavailable
from webapp import llm
from webapp.accounts.authed import AuthedHttpRequest
from webapp.executor_glue import ensure_executor, executor_problem
from webapp.json_body import BadJsonBody, json_body_loads
from webapp.queries import services
from webapp.queries.examples import EXAMPLE_PROMPTS
from webapp.queries.forms import (
    HandWrittenForm,
    PromptForm,
    ProposalContextForm,
    RunBody,
    SaveBody,
)
from webapp.queries.images import get_run_image, image_response
from webapp.queries.models import Query, RunDirection
from webapp.queries.run_backends import runner_backend
from webapp.queries.selectors import get_query_for_user, get_run_for_user, run_list_for_query
from webapp.queries.status import run_failure, status_payload
from webapp.workspaces.selectors import workspace_panel_for_query

logger = logging.getLogger(__name__)


def _home(
    request: AuthedHttpRequest, form: PromptForm, error: str = "", status: int = 200
) -> HttpResponse:
    recent = Query.objects.filter(owner=request.user).only("id", "prompt", "kind")[:8]
    return render(
        request,
        "queries/home.html",
        {
            "form": form,
            "error": error,
            "examples": EXAMPLE_PROMPTS,
            "recent": recent,
            "llm_configured": llm.llm_configured(),
            "not_configured_help": llm.client.NOT_CONFIGURED,
        },
        status=status,
    )


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The prompt page; a visitor who is not signed in gets the landing page instead."""
    if not request.user.is_authenticated:
        return render(request, "landing/landing.html")
    return _home(cast(AuthedHttpRequest, request), PromptForm())


@login_required
@require_POST
def query_create(request: AuthedHttpRequest) -> HttpResponse:
    form = PromptForm(request.POST)
    if not form.is_valid():
        return _home(request, form, status=400)
    try:
        query = services.query_create(
            owner=request.user,
            prompt=form.cleaned_data["prompt"],
            kind=form.cleaned_data["kind"],
            credential_names=form.cleaned_data["credential_names"],
            connections=form.cleaned_data["connections"],
        )
    except llm.LLMError as exc:
        # The form is re-rendered with the prompt in it, and the hand-written path next to it.
        return _home(request, form, error=str(exc), status=502)
    return redirect("queries:query-detail", query_id=query.pk)


@login_required
@require_POST
def query_create_blank(request: AuthedHttpRequest) -> HttpResponse:
    form = HandWrittenForm(request.POST)
    if not form.is_valid():
        # A too-long prompt comes back with its error, never as a blank query without it.
        return _home(request, PromptForm(request.POST), status=400)
    query = services.query_create_blank(
        owner=request.user,
        prompt=form.cleaned_data["prompt"],
        kind=form.cleaned_data["kind"] or "python",
    )
    return redirect("queries:query-detail", query_id=query.pk)


def _sandbox_problem() -> str | None:
    """Why nothing can run, if the sandbox refused to start (embedded mode runs it here)."""
    if runner_backend().out_of_process:
        return executor_problem()
    try:
        ensure_executor()
    except BackendUnavailable as exc:
        return str(exc)
    return None


@login_required
@require_GET
def query_detail(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    runs = run_list_for_query(query)
    latest = runs[0] if runs else None
    return render(
        request,
        "queries/query_detail.html",
        {
            "query": query,
            "runs": runs,
            "latest": latest,
            "latest_failure": run_failure(latest) if latest else None,
            "llm_configured": llm.llm_configured(),
            "executor_problem": _sandbox_problem(),
            "confirm_phrase": services.CONFIRM_PHRASE,
            # Versions a new proposal replaced: "Undo replace" puts the latest one back.
            "replaced_versions": query.versions.count(),
            # History's Re-run of an action outside the sandbox lands here instead of running.
            "rerun_requested": request.GET.get("rerun") == "1",
            # The fs/db/rest panel in the first HTML, as the panel view renders it.
            **(workspace_panel_for_query(query) if query.kind != "python" else {}),
            "page_data": {
                "queryId": query.pk,
                "saveUrl": reverse("queries:query-save", args=[query.pk]),
                "runUrl": reverse("queries:run-create", args=[query.pk]),
                "runListUrl": reverse("queries:run-list", args=[query.pk]),
                "credentialNames": query.credential_names,
                "reversible": query.reversible,
                "confirmPhrase": services.CONFIRM_PHRASE,
                "latestRun": status_payload(latest) if latest else None,
                "latestRunUrl": reverse("queries:run-detail", args=[latest.pk]) if latest else None,
            },
        },
    )


@login_required
@require_POST
def query_regenerate(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    context = ProposalContextForm(request.POST)
    context.is_valid()  # each field cleans to "nothing known" when unreadable
    try:
        services.query_generate(
            query=query,
            credential_names=context.cleaned_data.get("credential_names") or None,
            connections=context.cleaned_data.get("connections"),
        )
    except llm.LLMError as exc:
        messages.error(request, f"Generation failed: {exc}")
    return redirect("queries:query-detail", query_id=query.pk)


@login_required
@require_POST
def query_undo_replace(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    if services.query_undo_replace(query=query) is None:
        messages.info(request, "There is no replaced code to put back.")
    else:
        messages.success(request, "The code the proposal replaced is back in the editors.")
    return redirect("queries:query-detail", query_id=query.pk)


def _json_body(request: HttpRequest) -> object:
    # BadJsonBody (a 400 below) for anything json.loads cannot read, hostile input included.
    return json_body_loads(request.body or b"{}")


def _bad_request(exc: ValidationError | BadJsonBody) -> JsonResponse:
    if isinstance(exc, BadJsonBody):
        detail = str(exc)
    else:
        detail = exc.errors(include_input=False, include_url=False)[0]["msg"]
    return JsonResponse({"error": f"Invalid request: {detail}"}, status=400)


@login_required
@require_POST
def query_save(request: HttpRequest, query_id: int) -> JsonResponse:
    query = get_query_for_user(request.user, query_id)
    try:
        body = SaveBody.model_validate(_json_body(request))
    except (ValidationError, BadJsonBody) as exc:
        return _bad_request(exc)
    query = services.query_update(query=query, **body.model_dump())
    return JsonResponse({"saved_at": query.updated_at.isoformat()})


@login_required
@require_POST
def run_create(request: HttpRequest, query_id: int) -> JsonResponse:
    """Save the editors, then start a run of one of them (the run snapshots the saved code)."""
    query = get_query_for_user(request.user, query_id)
    try:
        body = RunBody.model_validate(_json_body(request))
    except (ValidationError, BadJsonBody) as exc:
        return _bad_request(exc)
    query = services.query_update(
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
    return JsonResponse(
        {
            "run": status_payload(run),
            "ws_path": f"/ws/runs/{run.pk}/",
            "cancel_url": reverse("queries:run-cancel", args=[run.pk]),
            "fix_url": reverse("queries:run-fix", args=[run.pk]),
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
    return render(request, "queries/_run_list.html", {"runs": run_list_for_query(query)})


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
            "cancel_url": reverse("queries:run-cancel", args=[run.pk]),
            "fix_url": reverse("queries:run-fix", args=[run.pk]),
        }
    )


@login_required
@require_GET
def run_image(request: HttpRequest, run_id: int, position: int) -> HttpResponse:
    """One image of the user's own run (a run's images never change once stored)."""
    image = get_run_image(get_run_for_user(request.user, run_id), position)
    return image_response(image, cache_control="private, max-age=86400")
