"""Share from the query page, not only from History (issue 16, finding 7)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory, RunChunkFactory, RunFactory
from webapp.runs.models import RunStatus
from webapp.shares.models import Share

pytestmark = pytest.mark.django_db


def test_the_query_page_has_a_share_form_for_its_query(owner, owner_client) -> None:
    query = QueryFactory(owner=owner)
    page = owner_client.get(reverse("queries:query-detail", args=[query.pk])).content.decode()
    assert f'action="{reverse("shares:create", args=[query.pk])}"' in page
    assert 'data-testid="share-button"' in page


def test_sharing_from_the_query_page_opens_the_new_link(owner, owner_client) -> None:
    query = QueryFactory(owner=owner)
    run = RunFactory(query=query, status=RunStatus.SUCCEEDED, exit_code=0)
    RunChunkFactory(run=run, text="shared output\n")
    response = owner_client.post(
        reverse("shares:create", args=[query.pk]),
        {"include_output": "on"},
        HTTP_REFERER=reverse("queries:query-detail", args=[query.pk]),
    )
    share = Share.objects.get(query=query)
    assert response["Location"] == reverse("shares:detail", args=[share.token])
    assert "shared output" in owner_client.get(response["Location"]).content.decode()
