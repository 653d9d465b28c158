"""The change panel on the query page: in the first HTML, and Keep / Discard by fetch
(JSON with the panel as it now stands) or by a plain form (a redirect back)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from tests.webapp.runs.waiting import wait_until
from webapp.runs import services
from webapp.runs.models import RunStatus
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.usefixtures("workspaces_root")
JSON = {"HTTP_ACCEPT": "application/json"}


def a_pending_fs_change(owner) -> PendingChange:
    query = QueryFactory(owner=owner, kind="fs")
    return PendingChange.objects.create(
        run=RunFactory(query=query, status=RunStatus.SUCCEEDED),
        kind="fs",
        status=ChangeStatus.PENDING,
        changes=[{"path": "joke.txt", "action": "added", "kind": "file", "diff": "+knock\n"}],
    )


def a_run_awaiting_keep(owner) -> PendingChange:
    query = QueryFactory(owner=owner, kind="fs", forward_code="open('joke.txt','w').write('k')\n")
    run = services.query_run(query=query)
    wait_until(
        lambda: PendingChange.objects.filter(run=run, status=ChangeStatus.PENDING).exists(),
        timeout=60,
        what="the fs change to await a choice",
    )
    return PendingChange.objects.get(run=run)


def test_the_query_page_lists_a_pending_fs_change_in_its_first_html(owner, owner_client):
    change = a_pending_fs_change(owner)
    url = reverse("queries:query-detail", args=[change.run.query_id])
    page = owner_client.get(url).content.decode()
    panel = page[page.index('data-testid="workspace-panel"') :]
    assert 'data-testid="change-list"' in panel
    assert "joke.txt" in panel
    assert 'data-testid="keep"' in panel
    assert 'data-change-status="pending"' in panel


def test_a_python_query_page_has_no_workspace_panel(owner, owner_client):
    query = QueryFactory(owner=owner, kind="python")
    page = owner_client.get(reverse("queries:query-detail", args=[query.pk])).content.decode()
    assert 'data-testid="workspace-panel"' not in page


@pytest.mark.usefixtures("threads_runner")
def test_keep_by_fetch_answers_with_the_kept_panel(owner, owner_client):
    change = a_run_awaiting_keep(owner)
    url = reverse("workspaces:change-keep", args=[change.pk])
    response = owner_client.post(url, **JSON)
    assert response.status_code == 200
    answer = response.json()
    assert (answer["status"], answer["error"]) == ("kept", "")
    assert '<span data-testid="change-status">Kept</span>' in answer["panel"]
    assert 'data-testid="keep"' not in answer["panel"]


@pytest.mark.usefixtures("threads_runner")
def test_discard_by_a_plain_form_goes_back_to_the_page(owner, owner_client):
    change = a_run_awaiting_keep(owner)
    response = owner_client.post(reverse("workspaces:change-discard", args=[change.pk]))
    assert response.status_code == 302
    assert response.url == reverse("queries:query-detail", args=[change.run.query_id])
    change.refresh_from_db()
    assert change.status == ChangeStatus.DISCARDED


def test_keep_of_a_change_nothing_waits_for_answers_409_with_the_reason(owner, owner_client):
    change = a_pending_fs_change(owner)  # no run holds it: the workspace has nothing pending
    response = owner_client.post(reverse("workspaces:change-keep", args=[change.pk]), **JSON)
    assert response.status_code == 409
    assert "not waiting for a decision" in response.json()["error"]
    assert 'data-testid="change"' in response.json()["panel"]


def test_a_stranger_cannot_keep_by_fetch(owner, stranger_client):
    change = a_pending_fs_change(owner)
    url = reverse("workspaces:change-keep", args=[change.pk])
    assert stranger_client.post(url, **JSON).status_code == 404
    change.refresh_from_db()
    assert change.status == ChangeStatus.PENDING
