"""The agent API as deployed: through the ASGI application, where /api/v1/exec is served by its
view directly (webapp.server.direct_view) and the rest of /api/v1/ by ApiASGIHandler, and the
site keeps Django's full stack."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.agents.tokens import token_create, token_revoke
from webapp.asgi import application
from webapp.server.api_asgi import ApiErrorShapeMiddleware

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "http://127.0.0.1:8000"


@database_sync_to_async
def _persona(username: str) -> tuple[Any, str]:
    user = get_user_model().objects.create_user(username=username)
    return user, token_create(owner=user).secret


@database_sync_to_async
def _session_cookie(user: Any) -> dict[str, str]:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return {name: client.cookies[name].value}


def _client(**kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url=BASE, **kwargs
    )


async def test_exec_runs_through_the_api_handler_with_the_security_headers() -> None:
    _, token = await _persona("agent")
    async with _client() as client:
        response = await client.post(
            "/api/v1/exec",
            json={"code": "print(1+1)"},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert (response.status_code, response.text) == (200, "2\n")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert "set-cookie" not in response.headers


async def test_a_host_outside_allowed_hosts_is_a_400_and_nothing_runs() -> None:
    _, token = await _persona("agent")
    async with _client() as client:
        response = await client.post(
            "/api/v1/exec",
            json={"code": "print('ran')"},
            headers={"Authorization": f"Bearer {token}", "Host": "evil.example"},
        )
    assert response.status_code == 400
    assert response.json() == {"error": "host not allowed"}


async def test_a_browser_session_is_no_api_credential() -> None:
    user, _ = await _persona("person")
    async with _client(cookies=await _session_cookie(user)) as client:
        response = await client.post("/api/v1/exec", json={"code": "print(1)"})
    assert response.status_code == 401
    assert response.json() == {"error": "missing, invalid or revoked API token"}


async def test_a_token_needs_no_csrf_token_and_a_revoked_one_is_refused_at_once() -> None:
    user, token = await _persona("agent")
    headers = {"Authorization": f"Bearer {token}", "Origin": "http://evil.example"}
    async with _client() as client:
        first = await client.post("/api/v1/exec", json={"code": "print(3)"}, headers=headers)
        await database_sync_to_async(
            lambda: token_revoke(owner=user, token_id=user.api_tokens.get().pk)
        )()
        second = await client.post("/api/v1/exec", json={"code": "print(4)"}, headers=headers)
    assert (first.status_code, first.text) == (200, "3\n")
    assert second.status_code == 401


async def test_the_rest_of_the_site_keeps_the_full_stack() -> None:
    async with _client() as client:
        docs = await client.get("/api/docs")
        login = await client.get("/accounts/login/")
    assert docs.status_code == 200
    assert login.status_code == 200
    assert "csrftoken" in login.cookies  # the CSRF middleware ran


async def api_answers() -> list[tuple[int, str, str | None, str]]:
    """A method a session path does not take, and a path the API does not have."""
    _, token = await _persona("agent")
    headers = {"Authorization": f"Bearer {token}"}
    async with _client(headers=headers) as client:
        answers = [
            await client.get("/api/v1/sessions/abc/exec"),
            await client.patch("/api/v1/sessions"),
            await client.get("/api/v1/nothing-here"),
        ]
    return [
        (r.status_code, r.headers["Content-Type"], r.headers.get("Allow"), r.text) for r in answers
    ]


async def test_djangos_own_404_and_ninjas_405_come_in_the_apis_error_shape() -> None:
    json = "application/json"
    assert await api_answers() == [
        (405, json, "POST", '{"error": "GET is not allowed here; use POST"}'),
        (405, json, "POST", '{"error": "PATCH is not allowed here; use POST"}'),
        (404, json, None, '{"error": "not found"}'),
    ]


@pytest.mark.sabotage
async def test_sabotage_without_the_shape_they_are_html_pages(monkeypatch) -> None:
    async def unshaped(self: Any, request: Any) -> Any:
        return await self.get_response(request)

    monkeypatch.setattr(ApiErrorShapeMiddleware, "__call__", unshaped)
    assert all(kind.startswith("text/html") for _, kind, _, _ in await api_answers())
