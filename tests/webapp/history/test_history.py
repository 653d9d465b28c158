"""History: my queries, newest first, searchable, with last-run status; re-run; delete."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.factories import QueryFactory, RunFactory
from tests.webapp.shares.factories import ShareFactory
from webapp.credentials.handoff import credentials_take
from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection, RunStatus

pytestmark = pytest.mark.django_db

HISTORY = reverse("history:list")


def listed_ids(response) -> list[int]:
    return [query.pk for query in response.context["page"].object_list]


def make_aged_queries(owner, count: int) -> list[Query]:
    """Queries created one minute apart, oldest first."""
    start = timezone.now() - timedelta(days=1)
    queries = [QueryFactory(owner=owner, prompt=f"query {i}") for i in range(count)]
    for i, query in enumerate(queries):
        Query.objects.filter(pk=query.pk).update(created_at=start + timedelta(minutes=i))
    return queries


def test_it_lists_only_my_queries_newest_first(owner, owner_client) -> None:
    mine = make_aged_queries(owner, 3)
    QueryFactory(prompt="someone else's")
    response = owner_client.get(HISTORY)
    assert listed_ids(response) == [q.pk for q in reversed(mine)]
    assert "someone else" not in response.content.decode()


def test_it_searches_prompt_and_both_codes(owner, owner_client) -> None:
    by_prompt = QueryFactory(owner=owner, prompt="send a joke to Ana")
    by_forward = QueryFactory(owner=owner, forward_code="requests.post(SLACK_URL)")
    by_reverse = QueryFactory(owner=owner, reverse_code="slack.chat_delete(ts)")
    QueryFactory(owner=owner, prompt="unrelated")
    QueryFactory(prompt="a slack query of someone else", forward_code="slack")
    assert listed_ids(owner_client.get(HISTORY, {"q": "joke"})) == [by_prompt.pk]
    assert set(listed_ids(owner_client.get(HISTORY, {"q": "SLACK"}))) == {
        by_forward.pk,
        by_reverse.pk,
    }


def test_it_shows_the_status_of_the_last_run(owner, owner_client) -> None:
    query = QueryFactory(owner=owner)
    RunFactory(query=query, status=RunStatus.SUCCEEDED)
    RunFactory(query=query, status=RunStatus.TIMED_OUT)
    never = QueryFactory(owner=owner)
    rows = {q.pk: q for q in owner_client.get(HISTORY).context["page"].object_list}
    assert rows[query.pk].last_run_status == "timed_out"
    assert rows[never.pk].last_run_status is None


def test_it_paginates(owner, owner_client) -> None:
    queries = make_aged_queries(owner, 25)
    assert len(listed_ids(owner_client.get(HISTORY))) == 20
    assert listed_ids(owner_client.get(HISTORY, {"page": 2})) == [
        q.pk for q in reversed(queries[:5])
    ]


def test_the_list_needs_the_same_number_of_sql_queries_for_any_number_of_rows(
    owner, owner_client, django_assert_max_num_queries
) -> None:
    def fill(count: int) -> None:
        for query in make_aged_queries(owner, count):
            RunFactory(query=query)
            RunFactory(query=query, status=RunStatus.FAILED)

    fill(1)
    with django_assert_max_num_queries(6) as one_row:
        owner_client.get(HISTORY)
    fill(19)
    with django_assert_max_num_queries(len(one_row.captured_queries)):
        assert len(listed_ids(owner_client.get(HISTORY))) == 20


def test_re_run_starts_a_new_forward_run_with_only_the_needed_credentials(
    owner, owner_client
) -> None:
    query = QueryFactory(owner=owner, credential_names=["SLACK_TOKEN"])
    response = owner_client.post(
        reverse("history:rerun", args=[query.pk]),
        {"credential:SLACK_TOKEN": "xoxb-rerun", "credential:OTHER": "not needed"},
    )
    run = Run.objects.get(query=query)
    assert response.status_code == 302
    assert response["Location"] == reverse("queries:query-detail", args=[query.pk])
    assert (run.direction, run.status, run.code) == (
        RunDirection.FORWARD,
        RunStatus.QUEUED,
        query.forward_code,
    )
    assert credentials_take(run_id=run.pk) == {"SLACK_TOKEN": "xoxb-rerun"}


def test_re_run_without_a_needed_credential_runs_nothing_and_names_it(owner, owner_client) -> None:
    query = QueryFactory(owner=owner, credential_names=["SLACK_TOKEN"])
    response = owner_client.post(reverse("history:rerun", args=[query.pk]), follow=True)
    assert not Run.objects.filter(query=query).exists()
    assert "Missing credential: SLACK_TOKEN." in response.content.decode()


def test_re_run_of_an_irreversible_query_sends_the_person_to_confirm_on_its_page(
    owner, owner_client
) -> None:
    query = QueryFactory(owner=owner, reversible=False)
    response = owner_client.post(reverse("history:rerun", args=[query.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("queries:query-detail", args=[query.pk])
    assert "run anyway" in response.content.decode()
    assert not Run.objects.filter(query=query).exists()


def test_delete_removes_the_query_its_runs_and_its_links(owner, owner_client) -> None:
    query = QueryFactory(owner=owner)
    RunFactory(query=query)
    share = ShareFactory(query=query)
    response = owner_client.post(reverse("history:delete", args=[query.pk]))
    assert response.status_code == 302
    assert not Query.objects.filter(pk=query.pk).exists()
    assert not Run.objects.filter(query_id=query.pk).exists()
    assert Client().get(reverse("shares:detail", args=[share.token])).status_code == 404


def test_it_deletes_a_query_whose_run_is_still_queued(owner, owner_client) -> None:
    query = QueryFactory(owner=owner)
    RunFactory(query=query, status=RunStatus.QUEUED)
    owner_client.post(reverse("history:delete", args=[query.pk]))
    assert not Query.objects.filter(pk=query.pk).exists()


def test_it_rejects_a_stranger_re_running_or_deleting(owner, stranger_client) -> None:
    query = QueryFactory(owner=owner)
    assert stranger_client.post(reverse("history:rerun", args=[query.pk])).status_code == 404
    assert stranger_client.post(reverse("history:delete", args=[query.pk])).status_code == 404
    assert Query.objects.filter(pk=query.pk).exists()
    assert not Run.objects.exists()


def test_the_re_run_form_asks_the_browser_for_the_querys_credentials(owner, owner_client) -> None:
    QueryFactory(owner=owner, credential_names=["SLACK_TOKEN", "DB_URL"])
    body = owner_client.get(HISTORY).content.decode()
    assert 'data-credential-names="SLACK_TOKEN,DB_URL"' in body
    assert "accounts/credentials.js" in body
