"""A refused user's next run requests are answered in front of Django (webapp.server.refused_early).

Driven through the API's ASGI app as the server runs it (webapp.server.api_asgi.api_application).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator

from webapp.admission.backends import get_admission, get_limiter
from webapp.admission.fairshare import refused_recently
from webapp.agents import auth
from webapp.agents.bearers import known_bearers
from webapp.server.api_asgi import api_application
from webapp.server.refused_early import is_run_request


@pytest.fixture(autouse=True)
def _one_run_per_host(settings) -> None:
    settings.AGENTS_MAX_RUNS_PER_HOST = 1
    settings.AGENTS_MAX_WAITING_PER_USER = 0


async def asgi_post(path: str, token: str, body: dict[str, Any]) -> tuple[int, dict, Any]:
    """POST through the API's ASGI app: (status, headers, JSON body)."""
    data = json.dumps(body).encode()
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    communicator = ApplicationCommunicator(api_application(), scope)
    await communicator.send_input({"type": "http.request", "body": data, "more_body": False})
    start = await communicator.receive_output(timeout=30)
    body_message = await communicator.receive_output(timeout=30)
    await communicator.wait(timeout=5)
    headers = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
    return start["status"], headers, json.loads(body_message["body"])


@pytest.fixture
def authentications(monkeypatch) -> list[str]:
    """The tokens Django's side authenticated (one per request that reached the API's views)."""
    seen: list[str] = []
    real = auth.TokenAuth.authenticate

    async def counted(self: auth.TokenAuth, request: Any, token: str) -> Any:
        seen.append(token)
        return await real(self, request, token)

    monkeypatch.setattr(auth.TokenAuth, "authenticate", counted)
    monkeypatch.setattr(refused_recently, "jitter", lambda: 0.0)
    return seen


async def refused_twice(owner, authentications: list[str]) -> tuple[tuple[int, dict, Any], int]:
    """The owner refused once through Django (the host's one slot is its own), then its next
    run request; returns that answer and how many authentications it reached."""
    with get_admission().admit(owner.user.pk, capacity=1, wait_s=0, queue=0):
        status, _, first = await asgi_post("/api/v1/exec", owner.token, {"code": "print(1)"})
        assert status == 429, first
        before = len(authentications)
        again = await asgi_post("/api/v1/exec", owner.token, {"code": "print(2)"})
    return again, len(authentications) - before


@pytest.mark.asyncio
async def test_a_refused_users_next_run_is_answered_before_django(owner, authentications):
    (status, headers, body), reached_django = await refused_twice(owner, authentications)
    assert reached_django == 0
    assert status == 429
    assert body == {"error": "at most 1 runs at once on this server, shared by 1 busy users"}
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.asyncio
@pytest.mark.sabotage
async def test_sabotage_without_the_known_bearers_every_refused_run_reaches_django(
    owner, authentications, monkeypatch
):
    monkeypatch.setattr(known_bearers, "ids", lambda secret: None)
    (status, _, _), reached_django = await refused_twice(owner, authentications)
    # The breach: the flood's request paid for Django again (and was refused there).
    assert status == 429
    assert reached_django == 1


@pytest.mark.asyncio
async def test_a_token_refused_by_its_own_limit_has_its_next_run_answered_before_django(
    owner, authentications, settings
):
    settings.AGENTS_MAX_CONCURRENT_PER_TOKEN = 1
    settings.AGENTS_MAX_WAITING_PER_TOKEN = 0
    token_id = await sync_to_async(lambda: owner.user.api_tokens.get().pk)()
    with get_limiter().slot(token_id, limit=1):
        status, _, first = await asgi_post("/api/v1/exec", owner.token, {"code": "print(1)"})
        assert status == 429, first
        before = len(authentications)
        status, headers, body = await asgi_post("/api/v1/exec", owner.token, {"code": "2"})
    assert len(authentications) == before
    assert (status, body) == (429, {"error": "at most 1 runs at once per token"})
    assert headers["retry-after"] == "1"


@pytest.mark.asyncio
async def test_another_users_run_is_not_held_by_a_refused_one(owner, stranger, authentications):
    with get_admission().admit(owner.user.pk, capacity=1, wait_s=0, queue=0):
        status, _, _ = await asgi_post("/api/v1/exec", owner.token, {"code": "print(1)"})
        assert status == 429
    status, _, _ = await asgi_post("/api/v1/exec", stranger.token, {"code": "print(7)"})
    assert status == 200


def test_only_run_requests_are_answered_early():
    def scope(method: str, path: str) -> dict[str, Any]:
        return {"method": method, "path": path}

    assert is_run_request(scope("POST", "/api/v1/exec"))
    assert is_run_request(scope("POST", "/api/v1/sessions/abc/exec"))
    assert not is_run_request(scope("GET", "/api/v1/exec"))
    assert not is_run_request(scope("POST", "/api/v1/sessions"))
    assert not is_run_request(scope("POST", "/api/v1/sessions//exec"))
    assert not is_run_request(scope("DELETE", "/api/v1/sessions/abc"))
    assert not is_run_request(scope("POST", "/api/v1/sessions/abc/files/exec"))


def test_tokens_are_known_by_digest_and_the_oldest_forgotten(monkeypatch):
    monkeypatch.setattr(known_bearers, "MAX_KNOWN", 2)
    known_bearers.note("udb_one", 11, 1)
    known_bearers.note("udb_two", 12, 2)
    known_bearers.note("udb_three", 13, 3)
    assert known_bearers.ids("udb_one") is None
    assert known_bearers.ids("udb_three") == (13, 3)
    assert "udb_two" not in repr(known_bearers._ids)
