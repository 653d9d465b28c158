"""PUT /api/v1/tokens/{id}/limits: an owner's unrestricted token sets another of the owner's
tokens' limits, which then refuse that token's actions. It cannot widen the blast radius of
the agent asking: a token setting its own limits, a token with limits setting another's, and
another person's token are each refused (deny), and go through with that check off (sabotage)."""

from __future__ import annotations

import json

import pytest

from tests.webapp.agents.conftest import Persona, asgi_request
from webapp.actions import limits as limits_module
from webapp.actions import tokens_api
from webapp.actions.limits import NO_LIMITS, Limits, token_limits, token_limits_set
from webapp.agents.models import ApiToken
from webapp.agents.tokens import token_create

ONLY_REST = {
    "allowed_kinds": ["rest"],
    "allowed_hosts": [],
    "allowed_db_targets": [],
    "actions_per_hour": None,
    "pending_at_once": None,
    "review_required": False,
    "rehearsal_required": False,
}
PY = {"kind": "python", "forward_code": "print(1)"}


def put_limits(persona: Persona, token_id: int, body: dict) -> object:
    headers = {
        "Authorization": f"Bearer {persona.token}",
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    url = f"/api/v1/tokens/{token_id}/limits"
    return asgi_request("PUT", url, content=json.dumps(body).encode(), headers=headers)


@pytest.fixture
def agent(owner: Persona) -> Persona:
    """A second token of the same owner's: the agent whose limits are set."""
    new = token_create(owner=owner.user, name="agent")
    return Persona(user=owner.user, token=new.secret, client=owner.client)


def agent_token(owner: Persona) -> ApiToken:
    return ApiToken.objects.get(owner=owner.user, name="agent")


def owner_token(owner: Persona) -> ApiToken:
    return ApiToken.objects.get(owner=owner.user, name="test")


def refused(response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert words in response.json()["error"]


def test_limits_set_through_the_api_refuse_the_agents_action(owner, agent):
    target = agent_token(owner)
    answer = put_limits(owner, target.pk, ONLY_REST)
    assert answer.status_code == 200, answer.text
    assert answer.json() == ONLY_REST
    assert owner.get(f"/api/v1/tokens/{target.pk}/limits").json() == ONLY_REST
    assert agent.get("/api/v1/actions/limits").json() == ONLY_REST
    action = agent.post("/api/v1/actions", PY)
    refused(action, 403, "limit allowed_kinds: ")


def test_a_bad_value_is_a_400_and_changes_nothing(owner, agent):
    target = agent_token(owner)
    answer = put_limits(owner, target.pk, {**ONLY_REST, "allowed_kinds": ["shell"]})
    refused(answer, 400, "unknown kinds: shell")
    assert token_limits(target) == NO_LIMITS


def test_a_body_missing_a_limit_is_a_400(owner, agent):
    body = {k: v for k, v in ONLY_REST.items() if k != "review_required"}
    assert put_limits(owner, agent_token(owner).pk, body).status_code == 400
    assert token_limits(agent_token(owner)) == NO_LIMITS


def test_deny_a_token_setting_its_own_limits(owner, agent):
    token_limits_set(token=agent_token(owner), limits=Limits(**ONLY_REST))
    lifted = {**ONLY_REST, "allowed_kinds": []}
    refused(put_limits(agent, agent_token(owner).pk, lifted), 403, "cannot set its own limits")
    assert token_limits(agent_token(owner)).allowed_kinds == ["rest"]
    # Even the owner's unrestricted token does not set its own (the page does).
    refused(put_limits(owner, owner_token(owner).pk, ONLY_REST), 403, "cannot set its own")
    assert token_limits(owner_token(owner)) == NO_LIMITS


@pytest.mark.sabotage
def test_sabotage_without_the_own_token_check_a_token_sets_its_own_limits(
    owner, agent, monkeypatch
):
    monkeypatch.setattr(tokens_api, "own_limits_refuse", lambda **_: None)
    assert put_limits(owner, owner_token(owner).pk, ONLY_REST).status_code == 200
    assert token_limits(owner_token(owner)).allowed_kinds == ["rest"]
    # A limited agent lifting its own is still refused, by the other check.
    token_limits_set(token=agent_token(owner), limits=Limits(**ONLY_REST))
    lifted = {**ONLY_REST, "allowed_kinds": []}
    refused(put_limits(agent, agent_token(owner).pk, lifted), 403, "has limits of its own")


@pytest.mark.sabotage
def test_sabotage_without_both_checks_an_agent_lifts_its_own_limits(owner, agent, monkeypatch):
    monkeypatch.setattr(tokens_api, "own_limits_refuse", lambda **_: None)
    monkeypatch.setattr(tokens_api, "limited_setter_refuse", lambda **_: None)
    token_limits_set(token=agent_token(owner), limits=Limits(**ONLY_REST))
    answer = put_limits(agent, agent_token(owner).pk, {**ONLY_REST, "allowed_kinds": []})
    assert answer.status_code == 200, answer.text
    assert token_limits(agent_token(owner)).allowed_kinds == []


def test_deny_a_limited_token_setting_another_tokens_limits(owner, agent):
    token_limits_set(token=agent_token(owner), limits=Limits(**ONLY_REST))
    answer = put_limits(agent, owner_token(owner).pk, {**ONLY_REST, "allowed_kinds": ["fs"]})
    refused(answer, 403, "has limits of its own")
    assert token_limits(owner_token(owner)) == NO_LIMITS


@pytest.mark.sabotage
def test_sabotage_without_the_limited_setter_check_a_limited_token_sets_anothers(
    owner, agent, monkeypatch
):
    monkeypatch.setattr(tokens_api, "limited_setter_refuse", lambda **_: None)
    token_limits_set(token=agent_token(owner), limits=Limits(**ONLY_REST))
    answer = put_limits(agent, owner_token(owner).pk, {**ONLY_REST, "allowed_kinds": ["fs"]})
    assert answer.status_code == 200, answer.text
    assert token_limits(owner_token(owner)).allowed_kinds == ["fs"]


def test_deny_another_persons_token_is_a_404(owner, stranger):
    theirs = owner_token(owner)
    assert stranger.get(f"/api/v1/tokens/{theirs.pk}/limits").status_code == 404
    assert put_limits(stranger, theirs.pk, ONLY_REST).status_code == 404
    assert token_limits(theirs) == NO_LIMITS


@pytest.mark.sabotage
def test_sabotage_without_the_owner_filter_another_persons_token_is_changed(
    owner, stranger, monkeypatch
):
    monkeypatch.setattr(
        tokens_api, "owned_token", lambda owner, token_id: ApiToken.objects.get(pk=token_id)
    )
    theirs = owner_token(owner)
    assert put_limits(stranger, theirs.pk, ONLY_REST).status_code == 200
    assert token_limits(theirs).allowed_kinds == ["rest"]


def test_the_checks_are_the_limits_modules(owner):
    """One implementation: the API calls webapp.actions.limits' own checks."""
    assert tokens_api.owned_token is limits_module.owned_token
    assert tokens_api.token_limits_set is limits_module.token_limits_set


def test_get_and_put_are_in_the_openapi_schema():
    from webapp.agents.api import api

    path = api.get_openapi_schema()["paths"]["/api/v1/tokens/{token_id}/limits"]
    assert {"get", "put"} <= set(path)
    assert 403 in path["put"]["responses"]
