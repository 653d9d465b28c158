"""Hostile JSON bodies on the query page's calls (save, run): a 400 in the page's error shape."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import QueryFactory
from webapp import json_body
from webapp.runs.models import Run

DEEP = b'{"forward_code": "print(1)", "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}"
HUGE_INT = b'{"forward_code": "print(1)", "extra": ' + b"7" * 5000 + b"}"
BODIES = pytest.mark.parametrize(
    ("raw", "message"),
    [(DEEP, "nested too deeply"), (HUGE_INT, "number longer than 4300 digits")],
)
CALLS = pytest.mark.parametrize("url_name", ["queries:query-save", "runs:run-create"])


def post(client: Client, url_name: str, query_id: int, raw: bytes):
    url = reverse(url_name, args=[query_id])
    return client.post(url, data=raw, content_type="application/json")


@BODIES
@CALLS
def test_a_hostile_body_is_a_clear_400_and_changes_nothing(
    owner_client, owner, url_name, raw, message
) -> None:
    query = QueryFactory(owner=owner, forward_code="print('kept')\n")
    response = post(owner_client, url_name, query.pk, raw)
    assert response.status_code == 400
    assert response.json()["error"].startswith("Invalid request: request body ")
    assert message in response.json()["error"]
    query.refresh_from_db()
    assert query.forward_code == "print('kept')\n"
    assert not Run.objects.exists()


@pytest.mark.sabotage
@BODIES
@CALLS
def test_sabotage_decoding_without_the_guard_answers_500(
    owner, url_name, raw, message, monkeypatch
) -> None:
    monkeypatch.setattr(json_body, "json_body_loads", lambda body: json.loads(body))
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    query = QueryFactory(owner=owner)
    assert post(client, url_name, query.pk, raw).status_code == 500
