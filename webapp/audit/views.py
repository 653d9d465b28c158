"""The ledger's pages: /audit/ (a person's own entries) and /audit/all/ (staff), with filters
and `?format=jsonl` for an export of what the filters select."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.audit.export import entries_jsonl
from webapp.audit.models import AuditEntry, AuditEvent
from webapp.audit.selectors import AuditFilters, audit_list_all, audit_list_for_user

PAGE_SIZE = 50


@login_required
@require_GET
def audit_list_view(request: HttpRequest) -> HttpResponseBase:
    filters = AuditFilters.from_query(request.GET.dict())
    return _page(request, audit_list_for_user(request.user, filters), filters, staff=False)


@staff_member_required
@require_GET
def audit_all_view(request: HttpRequest) -> HttpResponseBase:
    filters = AuditFilters.from_query(request.GET.dict(), staff=True)
    return _page(request, audit_list_all(filters), filters, staff=True)


def _page(
    request: HttpRequest, entries: QuerySet[AuditEntry], filters: AuditFilters, *, staff: bool
) -> HttpResponseBase:
    if request.GET.get("format") == "jsonl":
        response = StreamingHttpResponse(
            entries_jsonl(entries), content_type="application/x-ndjson; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="undoable-audit.jsonl"'
        return response
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    kept = request.GET.copy()
    kept.pop("page", None)
    return render(
        request,
        "audit/list.html",
        {
            "page": page,
            "filters": filters,
            "staff": staff,
            "events": AuditEvent.choices,
            "query_string": kept.urlencode(),
        },
    )
