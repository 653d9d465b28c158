"""A forward run of an action the model marked irreversible needs the typed phrase, checked by the
server: a request that skips the page's question is refused and nothing runs."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.factories import QueryFactory
from webapp.runs import runner, services
from webapp.runs.models import Run, RunStatus

WROTE = "print('it ran')\n"


def start_run(client, query, **body):
    return client.post(
        reverse("runs:run-create", args=[query.pk]),
        data=json.dumps({"credentials": {}, **body}),
        content_type="application/json",
    )


@pytest.mark.parametrize(
    "extra",
    [{}, {"confirm": ""}, {"confirm": "yes"}, {"confirm": "run"}, {"confirm": "run anyway!"}],
)
def test_it_refuses_an_irreversible_run_without_the_phrase(owner_client, owner, extra) -> None:
    query = QueryFactory(owner=owner, reversible=False, forward_code=WROTE)
    response = start_run(owner_client, query, direction="forward", **extra)
    assert response.status_code == 400
    assert 'Type "run anyway"' in response.json()["error"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_service_refuses_it_too_so_no_caller_can_skip_the_question() -> None:
    query = QueryFactory(reversible=False)
    with pytest.raises(services.ConfirmationRequired):
        services.query_run(query=query, direction="forward", confirm="no")
    assert not Run.objects.exists()


@pytest.mark.usefixtures("threads_runner")
@pytest.mark.parametrize(
    ("reversible", "direction", "extra"),
    [
        (False, "forward", {"confirm": "run anyway"}),
        (False, "forward", {"confirm": "  Run Anyway "}),
        (False, "reverse", {}),
        (True, "forward", {}),
    ],
)
def test_it_runs_with_the_phrase_and_an_undo_or_a_reversible_action_needs_none(
    owner_client, owner, reversible, direction, extra
) -> None:
    query = QueryFactory(owner=owner, reversible=reversible, forward_code=WROTE, reverse_code=WROTE)
    response = start_run(owner_client, query, direction=direction, **extra)
    assert response.status_code == 201
    run_id = response.json()["run"]["run_id"]
    assert runner.wait(run_id, 30)
    run = Run.objects.get(pk=run_id)
    assert (run.direction, run.status) == (direction, RunStatus.SUCCEEDED)


def test_the_page_asks_for_the_phrase_the_server_checks(owner_client, owner) -> None:
    query = QueryFactory(owner=owner, reversible=False)
    response = owner_client.get(reverse("queries:query-detail", args=[query.pk]))
    page_data = response.context["page_data"]
    assert (page_data["reversible"], page_data["confirmPhrase"]) == (False, "run anyway")
    assert "type “run anyway” before it runs" in response.content.decode()
