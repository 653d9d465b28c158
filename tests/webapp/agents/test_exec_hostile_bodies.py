"""Hostile JSON bodies on /api/v1/exec: deep nesting and huge integers are 400s, never 500s."""

from __future__ import annotations

import json

import pytest

from webapp import json_body

pytestmark = pytest.mark.django_db

EXEC = "/api/v1/exec"
DEEP = b'{"code": "print(1)", "extra": ' + b"[" * 5000 + b"]" * 5000 + b"}"
HUGE_INT = b'{"code": "print(1)", "timeout_s": ' + b"7" * 5000 + b"}"


@pytest.mark.parametrize(
    ("raw", "message"),
    [(DEEP, "nested too deeply"), (HUGE_INT, "number longer than 4300 digits")],
)
def test_a_hostile_body_is_a_clear_400_and_runs_nothing(owner, raw, message) -> None:
    response = owner.post(EXEC, None, raw=raw, accept="application/json")
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert "X-Exit-Code" not in response


@pytest.mark.sabotage
@pytest.mark.parametrize("raw", [DEEP, HUGE_INT])
def test_sabotage_decoding_without_the_guard_answers_500(owner, raw, monkeypatch) -> None:
    # json.loads raises RecursionError or ValueError on these: only the guard makes them 400s.
    monkeypatch.setattr(json_body, "json_body_loads", lambda body: json.loads(body))
    response = owner.post(EXEC, None, raw=raw)
    assert response.status_code == 500
    assert response.json() == {"error": "internal error"}
