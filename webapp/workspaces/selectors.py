"""Reads for workspaces, scoped to the owner (404 for anyone else)."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.http import Http404, HttpRequest
from django.urls import reverse
from django.utils import timezone

from webapp import llm
from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.workspaces.models import ChangeStatus, PendingChange, Workspace
from webapp.workspaces.services import workspace_for_query
from webapp.workspaces.waiting import Waiting, WaitingPayload, waiting_from_sources

MAX_LISTED = 200
MAX_WAITING_LISTED = 100


def get_change_for_user(user: User | AnonymousUser, change_id: int) -> PendingChange:
    """The user's own pending change (through its run's query), or Http404."""
    if not user.is_authenticated:
        raise Http404("No such change")
    try:
        return PendingChange.objects.select_related("run__query").get(
            pk=change_id, run__query__owner=user
        )
    except PendingChange.DoesNotExist:
        raise Http404("No such change") from None


def get_workspace_for_user(user: User | AnonymousUser, workspace_id: int) -> Workspace:
    """The user's own workspace, or Http404."""
    if not user.is_authenticated:
        raise Http404("No such workspace")
    try:
        return Workspace.objects.get(pk=workspace_id, owner=user)
    except Workspace.DoesNotExist:
        raise Http404("No such workspace") from None


def change_latest_for_query(query: Query) -> PendingChange | None:
    return PendingChange.objects.filter(run__query=query).order_by("-created_at", "-id").first()


def query_page_workspace(request: HttpRequest, query: Query) -> dict[str, Any]:
    """The query page's section (webapp.queries.sections): the fs/db/rest panel in the first
    HTML, as the panel view renders it; nothing for a python query."""
    return workspace_panel_for_query(query) if query.kind != "python" else {}


def workspace_panel_for_query(query: Query) -> dict[str, Any]:
    """Everything templates/workspaces/panel_body.html shows, for the query page's first HTML
    and for the panel view the page fetches when a change event arrives. The workspace
    (and its folder) is created on first view, so an empty one can take uploads."""
    workspace = workspace_for_query(query) if query.kind in ("fs", "db") else None
    change = change_latest_for_query(query)
    seconds_left = None
    if change is not None and change.deadline is not None and change.is_open:
        seconds_left = max(0, int((change.deadline - timezone.now()).total_seconds()))
    has_forward = Run.objects.filter(
        query=query, direction=RunDirection.FORWARD, status=RunStatus.SUCCEEDED
    ).exists()
    return {
        "workspace": workspace,
        "files": workspace_listing(workspace) if workspace else [],
        "change": change,
        "seconds_left": seconds_left,
        "can_regenerate": has_forward and llm.llm_configured(),
        "probe": _latest_probe(query),
    }


def _latest_probe(query: Query) -> dict[str, Any] | None:
    """A rest query's probe: declared (its code) and, once an Undo ran it, its outcome."""
    if query.kind != "rest" or not query.probe_code.strip():
        return None
    reverse = (
        Run.objects.filter(query=query, direction=RunDirection.REVERSE)
        .order_by("-created_at", "-id")
        .first()
    )
    return {"code": query.probe_code, "outcome": reverse.probe if reverse else None}


def workspace_listing(workspace: Workspace) -> list[dict[str, Any]]:
    """Up to MAX_LISTED entries (path, size, mode, is_link), dot-files included."""
    entries: list[dict[str, Any]] = []
    root = workspace.root
    if not root.is_dir():
        return entries
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(f"{dirpath}/{d}")]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            entries.append(
                {
                    "path": os.path.relpath(path, root),
                    "size": st.st_size,
                    "mode": f"{st.st_mode & 0o7777:04o}",
                    "is_link": os.path.islink(path),
                }
            )
            if len(entries) >= MAX_LISTED:
                return entries
    return entries


def changes_waiting_for_user(user: User | AnonymousUser) -> list[PendingChange]:
    """The person's changes waiting for Keep or Discard, oldest first (none for a visitor)."""
    if not user.is_authenticated:
        return []
    return list(
        PendingChange.objects.filter(run__query__owner=user, status=ChangeStatus.PENDING)
        .select_related("run")
        .order_by("created_at", "id")[:MAX_WAITING_LISTED]
    )


def changes_waiting_summary(user: User | AnonymousUser) -> WaitingPayload:
    """The one count of what waits for the person's decision (the header, the Review page,
    the websocket): their changes waiting for Keep or Discard, and what other apps add (a
    rest action's effect waiting for Keep or Undo). One thing links to its page; several to
    the page listing them (the Review page lists all kinds)."""
    return changes_waiting_summary_until(user)[0]


def changes_waiting_summary_until(
    user: User | AnonymousUser,
) -> tuple[WaitingPayload, datetime | None]:
    """changes_waiting_summary, and when it next moves by itself with no write to announce it
    (Waiting.ends_at: the earliest rest action's pending timeout), or None."""
    waiting = changes_waiting_for_user(user)
    changes = Waiting(
        urls=[
            reverse("queries:query-detail", args=[change.run.query_id]) + "#pending-change"
            for change in waiting
        ],
        list_url=reverse("history:list") + "?waiting=1",
    )
    others = waiting_from_sources(user) if user.is_authenticated else []  # type: ignore[arg-type]
    kinds = [found for found in (changes, *others) if found.urls]
    count = sum(len(found.urls) for found in kinds)
    url = kinds[0].urls[0] if count == 1 else (kinds[-1] if kinds else changes).list_url
    ends_at = min((found.ends_at for found in kinds if found.ends_at), default=None)
    return WaitingPayload(type="waiting", count=count, url=url), ends_at
