"""Fixtures for the agent API tests: personas with tokens, and a client that speaks the API.

A persona's requests go through the ASGI application the server runs (webapp.asgi), as a
server would hand them over: the API's own handler and middleware, the refusals answered in front
of Django. Django's test client would take them through the site's handler instead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.admission.fairshare import local_admission, refused_recently
from webapp.admission.ratelimit import local_limiter
from webapp.agents.bearers import known_bearers
from webapp.agents.recent_tokens import recent_tokens
from webapp.agents.session_services import reset_session_manager
from webapp.agents.tokens import token_create
from webapp.asgi import application


class ApiResponse:
    """An httpx response that also answers as Django's does: `response["Content-Type"]`."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    def __getitem__(self, header: str) -> str:
        return self._response.headers[header]

    def __contains__(self, header: str) -> bool:
        return header in self._response.headers

    def has_header(self, header: str) -> bool:
        return header in self._response.headers


def asgi_request(
    method: str,
    path: str,
    *,
    content: bytes = b"",
    headers: dict[str, str],
    params: dict[str, Any] | None = None,
    app: Any = application,
) -> ApiResponse:
    """One request through the deployed ASGI application (or `app`), its path sent as written
    (`..` and all, as a client that does not normalise it would), its body in one message."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": urlencode(params or {}).encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver")]
        + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def serve() -> None:
        received = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not received.is_set():
                received.set()
                return {"type": "http.request", "body": content, "more_body": False}
            await asyncio.Event().wait()  # the client stays until the answer is complete
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)

    async_to_sync(serve)()
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return ApiResponse(
        httpx.Response(start["status"], headers=start.get("headers", []), content=body)
    )


@dataclass
class Persona:
    user: Any
    token: str
    client: Client

    def post(
        self,
        path: str,
        body: Any,
        *,
        accept: str = "*/*",
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        data = raw if raw is not None else json.dumps(body).encode()
        sent = {**self._headers(accept), "Content-Type": "application/json", **(headers or {})}
        return asgi_request("POST", path, content=data, headers=sent)

    def get(self, url: str, **params: Any) -> Any:
        return asgi_request("GET", url, params=params, headers=self._headers("application/json"))

    def put(self, path: str, data: bytes) -> Any:
        headers = {**self._headers(), "Content-Type": "application/octet-stream"}
        return asgi_request("PUT", path, content=data, headers=headers)

    def delete(self, path: str) -> Any:
        return asgi_request("DELETE", path, headers=self._headers())

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
