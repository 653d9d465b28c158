"""The pages and the page's JSON calls, through Django's test client."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from tests.fakes.llm_server import error, tool_call
from webapp.queries.models import Query
from webapp.runs import runner
from webapp.runs.models import Run, RunStatus

PROPOSAL = {
    "forward_code": "print('generated forward')",
    "reverse_code": "print('generated reverse')",
    "explanation": "Prints two things.",
}


def post_json(client, url: str, body: dict):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_without_an_llm_the_home_page_says_how_to_configure_one(owner_client, no_llm) -> None:
    page = owner_client.get(reverse("queries:home")).content.decode()
    for name in ("LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL"):
        assert name in page
    assert "Write code by hand" in page


@pytest.mark.django_db
def test_the_home_page_says_which_changes_expire_and_which_wait_for_good(owner_client) -> None:
    with override_settings(UNDOABLE_DB_PENDING_TIMEOUT_S=600):
        page = owner_client.get(reverse("queries:home")).content.decode()
    assert "a file change waits for good" in page
    assert "a database change is discarded automatically after 10 minutes" in page
    with override_settings(UNDOABLE_DB_PENDING_TIMEOUT_S=90):
        page = owner_client.get(reverse("queries:home")).content.decode()
    assert "discarded automatically after 90 seconds" in page


def test_code_can_be_written_by_hand_without_an_llm(owner_client, owner, no_llm) -> None:
    response = owner_client.post(
        reverse("queries:query-create-blank"), {"prompt": "my own thing", "kind": "python"}
    )
    query = Query.objects.get(owner=owner)
    assert response["Location"] == reverse("queries:query-detail", args=[query.pk])
    assert query.prompt == "my own thing"


def test_a_prompt_becomes_a_query_with_both_codes(owner_client, owner, fake_llm) -> None:
    fake_llm.script(tool_call(PROPOSAL))
    response = owner_client.post(
        reverse("queries:query-create"), {"prompt": "print two things", "kind": "python"}
    )
    query = Query.objects.get(owner=owner)
    assert response["Location"] == reverse("queries:query-detail", args=[query.pk])
    page = owner_client.get(response["Location"]).content.decode()
    assert "print two things" in page
    assert "generated forward" in page and "generated reverse" in page


def test_a_failed_generation_keeps_the_prompt_and_shows_why(owner_client, fake_llm) -> None:
    fake_llm.script(error(500))
    response = owner_client.post(
        reverse("queries:query-create"), {"prompt": "keep this prompt please", "kind": "python"}
    )
    page = response.content.decode()
    assert response.status_code == 502
    assert "keep this prompt please" in page
    assert "HTTP 500" in page
    assert not Query.objects.exists()


def test_edits_are_saved_on_the_server(owner_client, owner) -> None:
    query = QueryFactory(owner=owner)
    response = post_json(
        owner_client,
        reverse("queries:query-save", args=[query.pk]),
        {"forward_code": "print('edited')\n"},
    )
    assert response.status_code == 200
    page = owner_client.get(reverse("queries:query-detail", args=[query.pk])).content.decode()
    assert "print('edited')" in page


def test_it_rejects_malformed_edits(owner_client, owner) -> None:
    query = QueryFactory(owner=owner)
    response = post_json(
        owner_client,
        reverse("queries:query-save", args=[query.pk]),
        {"credential_names": ["not a name"]},
    )
    assert response.status_code == 400


@pytest.mark.usefixtures("threads_runner")
def test_the_run_endpoint_saves_the_editor_and_runs_it(owner_client, owner) -> None:
    query = QueryFactory(owner=owner, forward_code="print('old')\n")
    response = post_json(
        owner_client,
        reverse("runs:run-create", args=[query.pk]),
        {"direction": "forward", "forward_code": "print('new')\n", "credentials": {}},
    )
    body = response.json()
    assert response.status_code == 201
    assert body["ws_path"] == f"/ws/runs/{body['run']['run_id']}/"
    assert runner.wait(body["run"]["run_id"], 30)
    run = Run.objects.get(pk=body["run"]["run_id"])
    assert (run.code, run.status) == ("print('new')\n", RunStatus.SUCCEEDED)
    listing = owner_client.get(reverse("runs:run-list", args=[query.pk])).content.decode()
    assert f"#{run.pk}" in listing


@pytest.mark.parametrize(
    ("name", "method", "target"),
    [
        ("queries:query-detail", "get", "query"),
        ("queries:query-save", "post", "query"),
        ("queries:query-regenerate", "post", "query"),
        ("runs:run-create", "post", "query"),
        ("runs:run-list", "get", "query"),
        ("runs:run-detail", "get", "run"),
        ("runs:run-cancel", "post", "run"),
        ("runs:run-fix", "post", "run"),
    ],
)
def test_a_stranger_gets_404_everywhere(stranger_client, owner, name, method, target) -> None:
    run = RunFactory(query=QueryFactory(owner=owner))
    obj = run if target == "run" else run.query
    url = reverse(name, args=[obj.pk])
    response = getattr(stranger_client, method)(url)
    assert response.status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
