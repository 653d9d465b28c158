"""Connecting a service: the server signs the state, trades the code (with the browser's PKCE
verifier) for a token, refreshes and revokes, against a real local OAuth 2.0 provider, and keeps
nothing. Every hostile answer is a clear 400 and gives no token."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from tests.webapp.connections.oauth_setup import (
    CLIENT_SECRET,
    authorize,
    begin,
    exchange,
    generic_provider,
    pkce_pair,
    sign_in,
)
from webapp.connections import oauth

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider():
    with generic_provider() as server:
        yield server


def test_a_sign_in_hands_the_token_to_the_browser_and_keeps_nothing(
    owner_client, provider, caplog, capsys
) -> None:
    caplog.set_level(logging.DEBUG)
    verifier, challenge = pkce_pair()
    started = begin(owner_client, ["items.read"], challenge)
    answer = authorize(started.json()["authorize_url"])
    response = exchange(owner_client, answer, verifier)

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    token = response.json()
    assert token["credential"] == "ITEMS_TOKEN"
    assert token["scopes"] == ["items.read"]
    assert provider.live_tokens()[token["access_token"]] == ["items.read"]
    capsys.readouterr()
    call_command("dumpdata")
    dump = capsys.readouterr().out
    for secret in (token["access_token"], token["refresh_token"]):
        assert secret not in dump
        assert secret not in caplog.text


def test_an_unconfigured_provider_is_hidden(owner_client) -> None:
    with override_settings(OAUTH_CLIENTS={}):
        page = owner_client.get("/accounts/").content.decode()
        assert 'data-testid="no-connections"' in page
        assert begin(owner_client, ["chat:write"], pkce_pair()[1]).status_code == 404


def test_a_configured_provider_offers_read_only_scopes_by_default(owner_client, provider) -> None:
    page = owner_client.get("/accounts/").content.decode()
    assert 'data-testid="connection-generic"' in page
    assert 'value="items.read" data-connection-scope checked' in page
    assert 'value="items.write" data-connection-scope>' in page
    assert CLIENT_SECRET not in page


def test_a_scope_the_provider_does_not_offer_is_refused(owner_client, provider) -> None:
    response = begin(owner_client, ["items.admin"], pkce_pair()[1])
    assert response.status_code == 400
    assert "offers no scope 'items.admin'" in response.json()["error"]


def test_a_state_started_for_someone_else_is_refused(owner_client, stranger_client, provider):
    verifier, challenge = pkce_pair()
    answer = authorize(begin(owner_client, ["items.read"], challenge).json()["authorize_url"])
    response = exchange(stranger_client, answer, verifier)
    assert response.status_code == 400
    assert "belongs to another sign-in (state)" in response.json()["error"]
    assert provider.token_requests == 0


def test_a_forged_state_is_refused(owner_client, provider) -> None:
    verifier, challenge = pkce_pair()
    answer = authorize(begin(owner_client, ["items.read"], challenge).json()["authorize_url"])
    response = exchange(owner_client, {**answer, "state": answer["state"] + "x"}, verifier)
    assert response.status_code == 400
    assert "does not belong to a sign-in this server started" in response.json()["error"]
    assert provider.token_requests == 0


@pytest.mark.sabotage
def test_sabotage_without_the_state_check_a_stranger_gets_the_owners_token(
    owner_client, stranger_client, provider, monkeypatch
) -> None:
    real = oauth.state_verify
    monkeypatch.setattr(
        oauth,
        "state_verify",
        lambda *, state, user_id, provider_id: real(
            state=state,
            user_id=oauth.signing.loads(state, salt=oauth._STATE_SALT)["u"],
            provider_id=provider_id,
        ),
    )
    verifier, challenge = pkce_pair()
    answer = authorize(begin(owner_client, ["items.read"], challenge).json()["authorize_url"])
    assert exchange(stranger_client, answer, verifier).status_code == 200


def test_a_replayed_code_is_refused_and_what_it_gave_is_revoked(owner_client, provider) -> None:
    verifier, challenge = pkce_pair()
    answer = authorize(begin(owner_client, ["items.read"], challenge).json()["authorize_url"])
    first = exchange(owner_client, answer, verifier).json()
    again = exchange(owner_client, answer, verifier)
    assert again.status_code == 400
    refused = "Items refused the sign-in: invalid_grant (code already used)."
    assert again.json() == {"error": refused}
    assert first["access_token"] not in provider.live_tokens()


def test_a_mismatched_pkce_verifier_is_refused(owner_client, provider) -> None:
    _, challenge = pkce_pair()
    other_verifier, _ = pkce_pair()
    answer = authorize(begin(owner_client, ["items.read"], challenge).json()["authorize_url"])
    response = exchange(owner_client, answer, other_verifier)
    assert response.status_code == 400
    assert "PKCE verifier mismatch" in response.json()["error"]
    assert provider.live_tokens() == {}


def test_a_redirect_uri_not_registered_gets_no_code(owner_client, provider) -> None:
    # The page reached under another host name builds another redirect URI.
    started = begin(owner_client, ["items.read"], pkce_pair()[1], HTTP_HOST="localhost")
    response = httpx.get(started.json()["authorize_url"], follow_redirects=False, timeout=10)
    assert response.status_code == 400
    assert "redirect_uri not registered" in response.text
    assert "Location" not in response.headers


def test_a_provider_that_cannot_be_reached_is_a_clear_error(owner_client, provider) -> None:
    verifier, challenge = pkce_pair()
    answer = authorize(begin(owner_client, ["items.read"], challenge).json()["authorize_url"])
    provider.__exit__(None, None, None)
    response = exchange(owner_client, answer, verifier)
    assert response.status_code == 400
    assert response.json() == {"error": "Could not reach Items for the sign-in."}


def test_a_malformed_body_is_a_clear_error(owner_client, provider) -> None:
    response = owner_client.post(
        "/connections/generic/token",
        {"code": "x", "state": "y", "code_verifier": "short"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"].startswith("Invalid request: code_verifier:")


def test_refresh_gives_a_new_token_with_the_same_scopes(owner_client, provider) -> None:
    token = sign_in(owner_client, ["items.read", "items.write"])
    response = owner_client.post(
        "/connections/generic/refresh",
        {"refresh_token": token["refresh_token"], "grant": token["grant"]},
        content_type="application/json",
    )
    fresh = response.json()
    assert response.status_code == 200, fresh
    assert fresh["access_token"] != token["access_token"]
    assert fresh["refresh_token"] == token["refresh_token"]
    assert provider.live_tokens()[fresh["access_token"]] == ["items.read", "items.write"]


def test_revoke_asks_the_provider_and_the_token_stops_working(owner_client, provider) -> None:
    token = sign_in(owner_client, ["items.read"])
    response = owner_client.post(
        "/connections/generic/revoke",
        {"token": token["access_token"]},
        content_type="application/json",
    )
    assert response.json() == {"revoked": True}
    assert token["access_token"] not in provider.live_tokens()


def test_signed_out_visitors_cannot_exchange(provider) -> None:
    response = Client().post("/connections/generic/token", {}, content_type="application/json")
    assert response.status_code == 302
