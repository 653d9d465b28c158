"""The header's count of changes waiting (every page) counts the person's own changes only, and
History's "waiting" list shows only their queries: a stranger's pending change is neither counted
nor listed, nor linked to."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from webapp.workspaces import selectors
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.django_db


def pending_change_of(user, prompt: str) -> PendingChange:
    query = QueryFactory(owner=user, kind="fs", prompt=prompt)
    return PendingChange.objects.create(
        run=RunFactory(query=query), kind="fs", status=ChangeStatus.PENDING
    )


def header_count(page: str) -> str:
    return page.split("data-changes-waiting-count>", 1)[1].split("<", 1)[0]


def test_deny_a_strangers_waiting_change_is_not_counted_listed_or_linked(
    owner, owner_client, stranger
) -> None:
    theirs = pending_change_of(stranger, "the stranger's secret prompt")
    page = owner_client.get(reverse("history:list")).content.decode()
    assert header_count(page) == "0"
    assert 'data-testid="changes-waiting" hidden' in page
    waiting = owner_client.get(reverse("history:list") + "?waiting=1").content.decode()
    assert "the stranger's secret prompt" not in waiting
    assert reverse("queries:query-detail", args=[theirs.run.query_id]) not in page


def test_one_waiting_change_links_to_it_and_two_to_the_list(owner, owner_client) -> None:
    first = pending_change_of(owner, "first")
    page = owner_client.get(reverse("history:list")).content.decode()
    detail = reverse("queries:query-detail", args=[first.run.query_id])
    assert f'href="{detail}#pending-change"' in page
    assert ">1</span> change waiting</a>" in page
    pending_change_of(owner, "second")
    page = owner_client.get(reverse("queries:home")).content.decode()
    assert f'href="{reverse("history:list")}?waiting=1"' in page
    assert ">2</span> changes waiting</a>" in page
    listed = owner_client.get(reverse("history:list") + "?waiting=1").content.decode()
    assert "first" in listed and "second" in listed


@pytest.mark.sabotage
def test_sabotage_without_the_owner_filter_a_strangers_change_is_counted(
    owner, owner_client, stranger, monkeypatch
) -> None:
    def unscoped(user):
        return list(PendingChange.objects.filter(status=ChangeStatus.PENDING).select_related("run"))

    monkeypatch.setattr(selectors, "changes_waiting_for_user", unscoped)
    pending_change_of(stranger, "the stranger's secret prompt")
    page = owner_client.get(reverse("history:list")).content.decode()
    assert header_count(page) == "1"
