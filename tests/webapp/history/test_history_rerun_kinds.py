"""History's Re-run never runs an action outside the sandbox in one click: it opens the query's
page, which asks what a first run asks (issue 16, finding 7)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("kind", ["rest", "fs", "db"])
def test_re_run_of_an_action_outside_the_sandbox_opens_its_page_without_running(
    owner, owner_client, kind: str
) -> None:
    query = QueryFactory(owner=owner, kind=kind, credential_names=["SLACK_TOKEN"])
    response = owner_client.post(
        reverse("history:rerun", args=[query.pk]), {"credential:SLACK_TOKEN": "xoxb-again"}
    )
    detail = reverse("queries:query-detail", args=[query.pk])
    assert response.status_code == 302
    assert response["Location"] == f"{detail}?rerun=1"
    assert not Run.objects.filter(query=query).exists()
    page = owner_client.get(response["Location"]).content.decode()
    assert 'data-testid="rerun-note"' in page


def test_the_history_row_links_a_rest_re_run_to_the_query_page(owner, owner_client) -> None:
    rest = QueryFactory(owner=owner, kind="rest")
    python = QueryFactory(owner=owner, kind="python")
    page = owner_client.get(reverse("history:list")).content.decode()
    detail = reverse("queries:query-detail", args=[rest.pk])
    assert f'href="{detail}?rerun=1" data-testid="rerun"' in page
    assert f'action="{reverse("history:rerun", args=[python.pk])}"' in page
    assert f'action="{reverse("history:rerun", args=[rest.pk])}"' not in page


def test_the_rerun_note_of_an_irreversible_action_names_the_phrase(owner, owner_client) -> None:
    query = QueryFactory(owner=owner, kind="rest", reversible=False)
    url = reverse("queries:query-detail", args=[query.pk])
    page = owner_client.get(f"{url}?rerun=1").content.decode()
    assert "you will be asked to type “run anyway” first" in page
    assert 'data-testid="rerun-note"' not in owner_client.get(url).content.decode()
