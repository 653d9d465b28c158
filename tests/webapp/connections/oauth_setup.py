"""The fake provider as the app's `generic` provider, and one sign-in driven like the popup."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
from django.test import Client, override_settings

from tests.fakes.oauth_provider import FakeOAuthProvider

CLIENT_ID = "undoable-test-client"
CLIENT_SECRET = "client-secret-" + secrets.token_hex(8)
REDIRECT = "http://testserver/connections/callback/"


@contextmanager
def generic_provider(redirect_uris: list[str] | None = None) -> Iterator[FakeOAuthProvider]:
    with FakeOAuthProvider(
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uris=redirect_uris or [REDIRECT],
        scopes=["items.read", "items.write"],
    ) as provider:
        clients: dict[str, dict[str, str]] = {
            "generic": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
        }
        generic = {
            "name": "Items",
            "credential": "ITEMS_TOKEN",
            "authorize_url": provider.authorize_url,
            "token_url": provider.token_url,
            "revoke_url": provider.revoke_url,
            "read_scopes": ["items.read"],
            "write_scopes": ["items.write"],
        }
        with override_settings(OAUTH_CLIENTS=clients, OAUTH_GENERIC=generic):
            yield provider


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(32)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def begin(client: Client, scopes: list[str], challenge: str, **extra: Any) -> Any:
    return client.post(
        "/connections/generic/begin",
        {"scopes": scopes, "code_challenge": challenge},
        content_type="application/json",
        **extra,
    )


def authorize(url: str) -> dict[str, str]:
    """What the provider sends the popup back with (it approves at once)."""
    response = httpx.get(url, follow_redirects=False, timeout=10)
    assert response.status_code == 302, response.text
    return {k: v[0] for k, v in parse_qs(urlparse(response.headers["Location"]).query).items()}


def exchange(client: Client, answer: dict[str, str], verifier: str) -> Any:
    return client.post(
        "/connections/generic/token",
        {"code": answer["code"], "state": answer["state"], "code_verifier": verifier},
        content_type="application/json",
    )


def sign_in(client: Client, scopes: list[str]) -> dict[str, Any]:
    verifier, challenge = pkce_pair()
    started = begin(client, scopes, challenge)
    assert started.status_code == 200, started.content
    response = exchange(client, authorize(started.json()["authorize_url"]), verifier)
    assert response.status_code == 200, response.content
    return dict(response.json())
