"""Scopes as the blast radius: the model hears which scopes each connected service granted, the
query records the scopes its code needs, and a run whose token lacks one fails before running."""

from __future__ import annotations

import pytest

from tests.factories import QueryFactory
from tests.fakes.llm_server import tool_call
from tests.webapp.connections.oauth_setup import generic_provider, sign_in
from webapp.queries import services as query_services
from webapp.runs import services
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider():
    with generic_provider() as server:
        yield server


def _writing_query(owner):
    return QueryFactory(
        owner=owner,
        forward_code="print(1)\n",
        credential_names=["ITEMS_TOKEN"],
        needed_scopes={"ITEMS_TOKEN": ["items.write"]},
    )


def _run(query, token):
    return services.query_run(
        query=query,
        credentials={"ITEMS_TOKEN": token["access_token"]},
        grants={"ITEMS_TOKEN": token["grant"]},
    )


def test_a_run_needing_a_scope_not_granted_fails_before_running(owner, owner_client, provider):
    run = _run(_writing_query(owner), sign_in(owner_client, ["items.read"]))
    assert run.status == RunStatus.FAILED
    assert run.started_at == run.finished_at
    assert run.error == (
        "Missing scope: Items (ITEMS_TOKEN) was not granted items.write. "
        "Connect the service again with it in the Connections panel."
    )


def test_a_run_whose_token_was_granted_the_scope_is_queued(owner, owner_client, provider):
    run = _run(_writing_query(owner), sign_in(owner_client, ["items.read", "items.write"]))
    assert run.status == RunStatus.QUEUED


def test_a_receipt_for_another_token_grants_nothing(owner, owner_client, provider):
    reader = sign_in(owner_client, ["items.read"])
    writer = sign_in(owner_client, ["items.write"])
    run = _run(_writing_query(owner), {**reader, "grant": writer["grant"]})
    assert run.status == RunStatus.FAILED
    assert run.error.startswith("Missing scope: ")


@pytest.mark.sabotage
def test_sabotage_without_the_scope_check_a_read_only_token_starts_a_writing_run(
    owner, owner_client, provider, monkeypatch
):
    monkeypatch.setattr(services, "scopes_missing", lambda **kwargs: [])
    run = _run(_writing_query(owner), sign_in(owner_client, ["items.read"]))
    assert run.status == RunStatus.QUEUED


def test_the_model_hears_the_granted_scopes_and_the_query_keeps_the_ones_it_needs(
    owner, provider, fake_llm
):
    fake_llm.script(
        tool_call(
            {
                "forward_code": "import os\nprint(os.environ['ITEMS_TOKEN'][:0])\n",
                "reverse_code": "",
                "explanation": "Adds an item.",
                "credentials": ["ITEMS_TOKEN"],
                "scopes": [
                    {"credential": "ITEMS_TOKEN", "scope": "items.write"},
                    {"credential": "ITEMS_TOKEN", "scope": "items.admin"},
                    {"credential": "OTHER_TOKEN", "scope": "items.write"},
                ],
            }
        )
    )
    query = query_services.query_create(
        owner=owner,
        prompt="add an item called tea",
        credential_names=["ITEMS_TOKEN"],
        connections=[
            {"credential": "ITEMS_TOKEN", "scopes": ["items.read", "items.admin"]},
            {"credential": "UNKNOWN_TOKEN", "scopes": ["x"]},
            "not an object",
        ],
    )
    user_message = fake_llm.requests[-1]["messages"][1]["content"]
    assert (
        "- ITEMS_TOKEN: Items, granted items.read (items.read; read only); NOT granted: items.write"
    ) in user_message
    assert "UNKNOWN_TOKEN" not in user_message
    assert query.needed_scopes == {"ITEMS_TOKEN": ["items.write"]}


def test_an_unreadable_connections_field_is_no_context_rather_than_an_error(
    owner_client, provider, fake_llm
):
    fake_llm.script(tool_call({"forward_code": "print(1)", "reverse_code": "", "explanation": ""}))
    response = owner_client.post(
        "/queries/new", {"prompt": "say hi", "kind": "python", "connections": "[" * 5000}
    )
    assert response.status_code == 302, response.content[:300]
    assert "Connected services" not in fake_llm.requests[-1]["messages"][1]["content"]


def test_propose_again_tells_the_model_the_same_connections_and_credentials(
    owner, owner_client, provider, fake_llm
):
    query = QueryFactory(owner=owner, prompt="add an item called tea")
    fake_llm.script(tool_call({"forward_code": "print(1)", "reverse_code": "", "explanation": ""}))
    connections = '[{"credential": "ITEMS_TOKEN", "scopes": ["items.read"]}]'
    response = owner_client.post(
        f"/queries/{query.pk}/regenerate",
        {"credential_names": "ITEMS_TOKEN,BAD NAME", "connections": connections},
    )
    assert response.status_code == 302
    user_message = fake_llm.requests[-1]["messages"][1]["content"]
    assert "- ITEMS_TOKEN: Items, granted items.read" in user_message
    assert "BAD NAME" not in user_message
