"""A share and its fork keep the model's `reversible: false`: the forked action still asks for the
typed confirmation before a forward run."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import QueryFactory, UserFactory
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.shares import services
from webapp.shares.models import Share

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def fork_through_the_pages(owner, query) -> tuple[Client, Query]:
    """The owner shares the query, a teammate forks it; returns the teammate's client and fork."""
    response = signed_in(owner).post(reverse("shares:create", args=[query.pk]))
    assert response.status_code == 302
    share = Share.objects.get(query=query)
    teammate = UserFactory(username="teammate")
    client = signed_in(teammate)
    response = client.post(reverse("shares:fork", args=[share.token]))
    assert response.status_code == 302
    return client, Query.objects.get(owner=teammate)


def start_forward_run(client: Client, query: Query) -> int:
    response = client.post(
        reverse("runs:run-create", args=[query.pk]),
        data=json.dumps({"credentials": {}, "direction": "forward"}),
        content_type="application/json",
    )
    return response.status_code


def test_a_fork_of_an_irreversible_query_still_needs_the_typed_confirmation(owner) -> None:
    query = QueryFactory(owner=owner, reversible=False, forward_code="print('sent')\n")
    client, fork = fork_through_the_pages(owner, query)
    assert fork.reversible is False
    assert start_forward_run(client, fork) == 400
    assert not Run.objects.filter(query=fork).exists()
    page = client.get(reverse("queries:query-detail", args=[fork.pk]))
    assert page.context["page_data"]["reversible"] is False


def test_the_snapshot_carries_every_field_a_share_has_in_common_with_a_query() -> None:
    # A field added to both models later is either copied or named here on purpose.
    not_copied = {"id", "owner", "created_at"}
    share_fields = {f.name for f in Share._meta.concrete_fields}
    query_fields = {f.name for f in Query._meta.concrete_fields}
    assert (share_fields & query_fields) - not_copied == set(services.SNAPSHOT_FIELDS)


@pytest.mark.sabotage
def test_sabotage_a_copy_dropping_reversible_lets_the_forward_run_through(
    owner, monkeypatch
) -> None:
    without = tuple(name for name in services.SNAPSHOT_FIELDS if name != "reversible")
    monkeypatch.setattr(services, "SNAPSHOT_FIELDS", without)
    query = QueryFactory(owner=owner, reversible=False, forward_code="print('sent')\n")
    client, fork = fork_through_the_pages(owner, query)
    assert start_forward_run(client, fork) == 201
