"""/mcp takes the API's bearer token: without an active one no tool runs."""

from __future__ import annotations

import httpx
import pytest

from webapp.agents.tokens import token_authenticate, token_revoke
from webapp.mcp_server import asgi as mcp_asgi

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("threads_runner")]

# A whole MCP exchange in one POST (the server is stateless): call exec.
CALL_EXEC = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "exec", "arguments": {"code": "print('the tool ran')"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def post_tool_call(url: str, authorization: str | None, *, host: str = "") -> httpx.Response:
    headers = {**HEADERS, **({"Authorization": authorization} if authorization else {})}
    headers |= {"Host": host} if host else {}
    return httpx.post(f"{url}/mcp", json=CALL_EXEC, headers=headers, timeout=60)


@pytest.mark.parametrize("authorization", [None, "Bearer udb_not-a-real-token", "Basic x"])
def test_a_request_without_an_active_token_is_refused_before_any_tool_runs(
    app_server, authorization
):
    response = post_tool_call(app_server, authorization)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'
    assert "the tool ran" not in response.text


def test_a_revoked_token_is_refused(app_server, owner):
    assert post_tool_call(app_server, f"Bearer {owner.token}").status_code == 200
    token = token_authenticate(owner.token)
    assert token is not None
    token_revoke(owner=owner.user, token_id=token.pk)
    assert post_tool_call(app_server, f"Bearer {owner.token}").status_code == 401


@pytest.mark.sabotage
def test_sabotage_with_the_token_check_off_a_strangers_call_runs_the_tool(
    app_server, owner, monkeypatch
):
    """The deny test above fails without the endpoint's check (and BodyGuard's in front)."""
    anyone = token_authenticate(owner.token)

    async def any_secret(_secret: str) -> object:
        return anyone

    monkeypatch.setattr(mcp_asgi, "token_for_secret", any_secret)
    monkeypatch.setattr("webapp.server.request_bodies.bearer_route", lambda path: False)
    response = post_tool_call(app_server, "Bearer udb_not-a-real-token")
    assert response.status_code == 200
    assert "the tool ran" in response.text
