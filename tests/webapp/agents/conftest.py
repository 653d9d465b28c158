"""Fixtures for the agent API tests: personas with tokens, and a client that speaks the API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.agents.fairshare import local_admission, refused_recently
from webapp.agents.ratelimit import local_limiter
from webapp.agents.recent_tokens import recent_tokens
from webapp.agents.refused_early import known_bearers
from webapp.agents.session_services import reset_session_manager
from webapp.agents.tokens import token_create


@dataclass
class Persona:
    user: Any
    token: str
    client: Client

    def post(self, path: str, body: Any, *, accept: str = "*/*", raw: bytes | None = None) -> Any:
        data = raw if raw is not None else json.dumps(body).encode()
        return self.client.post(
            path, data=data, content_type="application/json", headers=self._headers(accept)
        )

    def get(self, url: str, **params: Any) -> Any:
        return self.client.get(url, params, headers=self._headers("application/json"))

    def put(self, path: str, data: bytes) -> Any:
        return self.client.put(
            path, data=data, content_type="application/octet-stream", headers=self._headers()
        )

    def delete(self, path: str) -> Any:
        return self.client.delete(path, headers=self._headers())

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Accept": accept}


def make_persona(username: str) -> Persona:
    user = get_user_model().objects.create_user(username=username)  # no password: hashing is slow
    return Persona(user=user, token=token_create(owner=user, name="test").secret, client=Client())


@pytest.fixture
def owner(transactional_db: None) -> Persona:
    return make_persona("owner")


@pytest.fixture
def stranger(transactional_db: None) -> Persona:
    return make_persona("stranger")


@pytest.fixture(autouse=True)
def _fresh_quota() -> Iterator[None]:
    local_limiter.reset()
    refused_recently.reset()
    known_bearers.reset()
    local_admission.forget_recent()
    recent_tokens.clear()
    yield
    local_limiter.reset()
    refused_recently.reset()
    known_bearers.reset()
    local_admission.forget_recent()
    recent_tokens.clear()


@pytest.fixture
def sessions() -> Iterator[None]:
    """Tests that open sessions close every sandbox they started."""
    yield
    reset_session_manager()
