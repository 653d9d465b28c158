"""The query page names its two ways back apart and explains each (issue 16, finding 8): Discard
throws a pending change away, Undo runs the reverse program (issue 42's vocabulary)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from tests.webapp.workspaces.conftest import workspaces_root  # noqa: F401
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.usefixtures("workspaces_root")


def test_the_reverse_program_button_says_what_it_runs(owner, owner_client) -> None:
    query = QueryFactory(owner=owner, kind="fs")
    page = owner_client.get(reverse("queries:query-detail", args=[query.pk])).content.decode()
    assert ">Run reverse program</button>" in page
    assert "Run undo" not in page
    assert 'title="Undo: runs the reverse code' in page
    assert "Discard throws it away." in page


def test_a_pending_change_is_kept_or_discarded_with_a_tooltip_for_each(owner, owner_client) -> None:
    query = QueryFactory(owner=owner, kind="db")
    PendingChange.objects.create(
        run=RunFactory(query=query), kind="db", status=ChangeStatus.PENDING
    )
    panel = owner_client.get(reverse("workspaces:panel", args=[query.pk])).content.decode()
    assert (
        'data-testid="keep" title="Apply this change for good (commit the transaction).">Keep<'
        in panel
    )
    assert ">Discard</button>" in panel
    assert (
        'data-testid="discard" title="Throw this pending change away (roll the transaction back)'
        in panel
    )


def test_a_db_change_without_statements_says_why_it_lists_nothing(owner, owner_client) -> None:
    query = QueryFactory(owner=owner, kind="db")
    PendingChange.objects.create(
        run=RunFactory(query=query), kind="db", status=ChangeStatus.PENDING, changes=[]
    )
    panel = owner_client.get(reverse("workspaces:panel", args=[query.pk])).content.decode()
    assert 'data-testid="change-empty"' in panel
    assert "no SQL statement" in panel
