"""Pages and the page's JSON calls. Thin: access helper -> form/body -> service -> response.

The query page's runs, console and workspace panel come from the apps built on this one
(webapp.queries.sections); the run calls are webapp.runs.views.
"""

from __future__ import annotations

import logging
from typing import cast

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp import llm
from webapp.accounts.authed import AuthedHttpRequest
from webapp.json_body import BadJsonBody, bad_json_body_response, json_body_model
from webapp.queries import services
from webapp.queries.examples import EXAMPLE_PROMPTS
from webapp.queries.forms import HandWrittenForm, PromptForm, ProposalContextForm, SaveBody
from webapp.queries.models import Query
from webapp.queries.sections import query_page_sections
from webapp.queries.selectors import get_query_for_user

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
            "db_pending_timeout": _duration(settings.UNDOABLE_DB_PENDING_TIMEOUT_S),
        },
        status=status,
    )


def _duration(seconds: float) -> str:
    """'10 minutes', '90 seconds': how long a pending db change waits, in the page's words."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{int(seconds // 60)} minutes"
    return f"{int(seconds)} seconds"


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


@login_required
@require_GET
def query_detail(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    sections = query_page_sections(request, query)
    return render(
        request,
        "queries/query_detail.html",
        {
            **sections,
            "query": query,
            "llm_configured": llm.llm_configured(),
            # Versions a new proposal replaced: "Undo replace" puts the latest one back.
            "replaced_versions": query.versions.count(),
            "page_data": {
                **sections["page_data"],
                "queryId": query.pk,
                "saveUrl": reverse("queries:query-save", args=[query.pk]),
                "credentialNames": query.credential_names,
                "reversible": query.reversible,
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


@login_required
@require_POST
def query_save(request: HttpRequest, query_id: int) -> JsonResponse:
    query = get_query_for_user(request.user, query_id)
    try:
        body = json_body_model(request, SaveBody)
    except BadJsonBody as exc:
        return bad_json_body_response(exc)
    query = services.query_update(query=query, **body.model_dump())
    return JsonResponse({"saved_at": query.updated_at.isoformat()})
