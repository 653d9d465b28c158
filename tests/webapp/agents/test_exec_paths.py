"""POST /api/v1/exec has two paths: straight from ASGI (webapp.server.direct_view, what the
server runs) and the ninja operation behind Django's handler (exec_operation, what the OpenAPI
schema describes and `make bench` compares). Both give the same answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from tests.bench.ninja_exec_asgi import application as through_ninja
from tests.webapp.agents.conftest import asgi_request
from webapp.asgi import application as deployed

EXEC = "/api/v1/exec"
COMPARED_HEADERS = (
    "content-type",
    "allow",
    "retry-after",
    "www-authenticate",
    "x-exit-code",
    "x-timed-out",
    "x-content-type-options",
    "x-frame-options",
)


def answer(app: Any, method: str, body: bytes, headers: dict[str, str]) -> tuple[Any, ...]:
    response = asgi_request(method, EXEC, content=body, headers=headers, app=app)
    kept = tuple(response.headers.get(name) for name in COMPARED_HEADERS)
    content = response.content
    if response.headers.get("content-type") == "application/json":
        parsed = json.loads(content)
        parsed.pop("duration_ms", None)  # a run's own figure
        content = parsed
    return response.status_code, kept, content


def battery(token: str) -> list[tuple[str, bytes, dict[str, str]]]:
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    as_json = {**auth, "Accept": "application/json"}
    return [
        ("POST", json.dumps({"code": "print(1+1)"}).encode(), auth),
        ("POST", json.dumps({"code": "import sys; sys.exit(3)"}).encode(), as_json),
        ("POST", json.dumps({"code": "print(1)"}).encode(), {"Content-Type": "application/json"}),
        ("POST", json.dumps({"code": "print(1)"}).encode(), {**auth, "Authorization": "Bearer x"}),
        ("POST", b"{not json", as_json),
        ("POST", b"[1, 2]", as_json),
        ("POST", b"{}", as_json),
        ("POST", json.dumps({"code": 7}).encode(), as_json),
        ("POST", json.dumps({"code": "x" * 2000}).encode(), as_json),
        ("POST", json.dumps({"code": "1", "language": "cobol"}).encode(), as_json),
        ("POST", json.dumps({"code": "1", "timeout_s": -1}).encode(), as_json),
        ("POST", b'{"code": "' + b"\xff" + b'"}', as_json),
        ("GET", b"", as_json),
        ("DELETE", b"", as_json),
    ]


@override_settings(AGENTS_MAX_CODE_BYTES=1000)
def test_the_ninja_operation_answers_as_the_direct_view(owner):
    for method, body, headers in battery(owner.token):
        direct = answer(deployed, method, body, headers)
        ninja = answer(through_ninja, method, body, headers)
        assert ninja == direct, (method, body[:40])


def test_the_schema_describes_exec_from_its_ninja_operation(client):
    schema = client.get("/api/openapi.json").json()
    operation = schema["paths"][EXEC]["post"]
    assert operation["operationId"] == "exec"
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ExecIn"}
    assert {"200", "401", "413", "429"} <= set(operation["responses"])


@pytest.mark.parametrize("app", [deployed, through_ninja], ids=["direct", "ninja"])
def test_a_refused_token_is_answered_the_same_on_both_paths(owner, app):
    with override_settings(AGENTS_RATE_PER_MINUTE=60, AGENTS_RATE_BURST=1):
        headers = {"Authorization": f"Bearer {owner.token}", "Accept": "application/json"}
        body = json.dumps({"code": "print(1)"}).encode()
        first = asgi_request("POST", EXEC, content=body, headers=headers, app=app)
        second = asgi_request("POST", EXEC, content=body, headers=headers, app=app)
    assert first.status_code == 200
    assert second.status_code == 429 and int(second["Retry-After"]) >= 1
