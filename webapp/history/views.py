"""History page: list and search a person's queries; open, re-run or delete one."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.authed import AuthedHttpRequest
from webapp.history.selectors import history_list_for_user
from webapp.history.services import query_delete
from webapp.queries.models import QueryKind
from webapp.queries.selectors import get_query_for_user
from webapp.runs.services import ConfirmationRequired, CredentialsMissing, query_run
from webapp.workspaces.models import ChangeStatus

PAGE_SIZE = 20
CREDENTIAL_FIELD = "credential:"


@login_required
@require_GET
def history_list_view(request: AuthedHttpRequest) -> HttpResponse:
    search = request.GET.get("q", "")
    waiting = request.GET.get("waiting") == "1"
    queries = history_list_for_user(request.user, search=search, waiting=waiting)
    page = Paginator(queries, PAGE_SIZE).get_page(request.GET.get("page"))
    for query in page.object_list:
        # The change's words, as its panel says them (shared/DESIGN.md's vocabulary).
        status = query.last_change_status  # type: ignore[attr-defined]
        query.change_label = ChangeStatus(status).label if status else ""  # type: ignore[attr-defined]
    return render(
        request, "history/list.html", {"page": page, "search": search, "waiting": waiting}
    )


@sensitive_post_parameters()  # credential values arrive in this POST: keep them out of reports
@login_required
@require_POST
def history_rerun_view(request: HttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    if query.kind != QueryKind.PYTHON:
        # Files, a database or a remote API: never again in one click (it would post to Slack
        # again). The query's page runs it, with the same confirmations as a first run.
        detail = reverse("queries:query-detail", args=[query.pk])
        return redirect(f"{detail}?rerun=1")
    credentials = {
        key.removeprefix(CREDENTIAL_FIELD): request.POST[key]
        for key in request.POST
        if key.startswith(CREDENTIAL_FIELD)
    }
    try:
        run = query_run(
            query=query, credentials=credentials, confirm=request.POST.get("confirm", "")
        )
    except CredentialsMissing as refused:
        # No run was created: the query's page says which credential, beside its Run button.
        messages.error(request, str(refused))
        return redirect("queries:query-detail", query_id=query.pk)
    except ConfirmationRequired as refused:
        # Irreversible: the query's page asks for the typed confirmation.
        messages.error(request, str(refused))
        return redirect("queries:query-detail", query_id=query.pk)
    if run.error:
        messages.error(request, run.error)
    return redirect("queries:query-detail", query_id=query.pk)


@login_required
@require_POST
def history_delete_view(request: HttpRequest, query_id: int) -> HttpResponse:
    query_delete(query=get_query_for_user(request.user, query_id))
    messages.success(request, "Query deleted.")
    return redirect("history:list")
