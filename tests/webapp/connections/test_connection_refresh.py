"""A refresh's receipt claims no more than the sign-in granted: the granted scopes come from the
receipt the browser sends back (signed, bound to its refresh token), never from a list the
browser writes, and the provider's answer can only narrow them (RFC 6749 6)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.core import signing

from tests.webapp.connections.oauth_setup import generic_provider, sign_in
from webapp.connections import oauth

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider():
    with generic_provider() as server:
        yield server


def _refresh(client: Any, **body: Any) -> Any:
    return client.post("/connections/generic/refresh", body, content_type="application/json")


def _receipt_scopes(answer: dict[str, Any]) -> list[str]:
    grant = oauth.grant_verify(
        receipt=answer["grant"], credential="ITEMS_TOKEN", access_token=answer["access_token"]
    )
    assert grant is not None
    return grant.scopes


def test_a_refresh_answer_without_scope_keeps_the_granted_scopes_not_the_browsers(
    owner_client, provider
) -> None:
    token = sign_in(owner_client, ["items.read"])
    provider.scope_in_answers = False
    response = _refresh(
        owner_client,
        refresh_token=token["refresh_token"],
        grant=token["grant"],
        scopes=["items.read", "items.write", "admin:everything"],
    )
    fresh = response.json()
    assert response.status_code == 200, fresh
    assert fresh["scopes"] == ["items.read"]
    assert _receipt_scopes(fresh) == ["items.read"]


def test_a_refresh_keeps_working_with_the_receipt_it_answered(owner_client, provider) -> None:
    token = sign_in(owner_client, ["items.read", "items.write"])
    provider.scope_in_answers = False
    first = _refresh(owner_client, refresh_token=token["refresh_token"], grant=token["grant"])
    receipt = first.json()["grant"]
    again = _refresh(owner_client, refresh_token=token["refresh_token"], grant=receipt)
    assert again.status_code == 200, again.json()
    assert _receipt_scopes(again.json()) == ["items.read", "items.write"]


def test_a_refresh_answer_naming_more_scopes_is_narrowed_to_the_grant(
    owner_client, provider
) -> None:
    token = sign_in(owner_client, ["items.read"])
    provider.refresh_answer_scope = "items.read items.write admin:everything"
    response = _refresh(owner_client, refresh_token=token["refresh_token"], grant=token["grant"])
    assert response.status_code == 200, response.json()
    assert _receipt_scopes(response.json()) == ["items.read"]


@pytest.mark.sabotage
def test_sabotage_without_the_narrowing_the_providers_wider_answer_is_signed(
    owner_client, provider, monkeypatch
) -> None:
    monkeypatch.setattr(oauth, "scopes_after_refresh", lambda *, granted, named: named or granted)
    token = sign_in(owner_client, ["items.read"])
    provider.refresh_answer_scope = "items.read items.write admin:everything"
    response = _refresh(owner_client, refresh_token=token["refresh_token"], grant=token["grant"])
    assert "admin:everything" in _receipt_scopes(response.json())


def test_another_connections_receipt_does_not_lend_its_scopes(owner_client, provider) -> None:
    narrow = sign_in(owner_client, ["items.read"])
    wide = sign_in(owner_client, ["items.read", "items.write"])
    provider.scope_in_answers = False
    requests = provider.token_requests
    response = _refresh(owner_client, refresh_token=narrow["refresh_token"], grant=wide["grant"])
    assert response.status_code == 400
    assert "grant receipt does not match its refresh token" in response.json()["error"]
    assert provider.token_requests == requests  # the provider was never asked


@pytest.mark.sabotage
def test_sabotage_without_the_refresh_token_binding_another_receipt_widens_the_grant(
    owner_client, provider, monkeypatch
) -> None:
    monkeypatch.setattr(
        oauth, "hmac", SimpleNamespace(new=oauth.hmac.new, compare_digest=lambda a, b: True)
    )
    narrow = sign_in(owner_client, ["items.read"])
    wide = sign_in(owner_client, ["items.read", "items.write"])
    provider.scope_in_answers = False
    response = _refresh(owner_client, refresh_token=narrow["refresh_token"], grant=wide["grant"])
    assert _receipt_scopes(response.json()) == ["items.read", "items.write"]


def _forged(token: dict[str, Any]) -> str:
    """A receipt claiming admin:everything for the real refresh token, under a key not the
    server's."""
    real = signing.loads(token["grant"], salt=oauth._GRANT_SALT)
    claim = {**real, "s": ["items.read", "admin:everything"]}
    return signing.dumps(claim, salt=oauth._GRANT_SALT, key="not-the-server-key")


def test_a_receipt_the_server_did_not_sign_is_refused(owner_client, provider) -> None:
    token = sign_in(owner_client, ["items.read"])
    provider.scope_in_answers = False
    response = _refresh(owner_client, refresh_token=token["refresh_token"], grant=_forged(token))
    assert response.status_code == 400
    assert "grant receipt does not match" in response.json()["error"]


@pytest.mark.sabotage
def test_sabotage_without_the_signature_check_a_forged_receipt_is_believed(
    owner_client, provider, monkeypatch
) -> None:
    token = sign_in(owner_client, ["items.read"])
    forged = _forged(token)
    provider.scope_in_answers = False
    real_loads = signing.loads

    def loads_any_key(value: str, *, salt: str, **kwargs: Any) -> Any:
        if salt == oauth._GRANT_SALT:
            kwargs["key"] = "not-the-server-key"
        return real_loads(value, salt=salt, **kwargs)

    monkeypatch.setattr(oauth.signing, "loads", loads_any_key)
    response = _refresh(owner_client, refresh_token=token["refresh_token"], grant=forged)
    assert "admin:everything" in response.json()["scopes"]


def test_a_receipt_from_before_refresh_binding_asks_to_connect_again(
    owner_client, provider
) -> None:
    token = sign_in(owner_client, ["items.read"])
    old = signing.loads(token["grant"], salt=oauth._GRANT_SALT)
    del old["r"]
    response = _refresh(
        owner_client,
        refresh_token=token["refresh_token"],
        grant=signing.dumps(old, salt=oauth._GRANT_SALT),
    )
    assert response.status_code == 400
    assert response.json()["error"].endswith("Nothing was refreshed; connect again.")
