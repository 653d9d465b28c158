"""/mcp behind the guards every bearer route has: its body capped from the request head
(webapp.server.request_bodies), its Host checked against ALLOWED_HOSTS (the SDK's DNS-rebinding
check)."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings

from tests.webapp.mcp_server.test_mcp_auth import CALL_EXEC, HEADERS, post_tool_call
from webapp.mcp_server import asgi as mcp_asgi
from webapp.server import request_bodies

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("threads_runner")]

GUARD_413 = "request body is too large: at most"


def post_too_large(url: str, token: str) -> httpx.Response:
    padding = "#" * (settings.AGENTS_MAX_BODY_BYTES + 1)
    call = {**CALL_EXEC, "params": {"name": "exec", "arguments": {"code": padding}}}
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    return httpx.post(f"{url}/mcp", json=call, headers=headers, timeout=60)


def test_a_body_past_the_api_cap_is_refused_from_its_head(app_server, owner):
    response = post_too_large(app_server, owner.token)
    assert response.status_code == 413
    assert GUARD_413 in response.json()["error"]


@pytest.mark.sabotage
def test_sabotage_without_the_cap_for_mcp_the_guard_lets_the_body_through(
    app_server, owner, monkeypatch
):
    monkeypatch.setattr(request_bodies, "route_body_cap", lambda scope: 10**9)
    response = post_too_large(app_server, owner.token)
    assert GUARD_413 not in response.text  # the SDK's own limit behind it answers instead


def test_a_host_outside_allowed_hosts_is_refused_before_any_tool_runs(app_server, owner):
    response = post_tool_call(app_server, f"Bearer {owner.token}", host="rebound.example")
    assert (response.status_code, response.text) == (421, "Invalid Host header")


def test_an_origin_outside_allowed_hosts_is_refused(app_server, owner):
    headers = {
        **HEADERS,
        "Authorization": f"Bearer {owner.token}",
        "Origin": "https://evil.example",
    }
    response = httpx.post(f"{app_server}/mcp", json=CALL_EXEC, headers=headers, timeout=60)
    assert (response.status_code, response.text) == (403, "Invalid Origin header")


@pytest.fixture
def unchecked_hosts(monkeypatch):
    """The sabotage: the SDK's host check off when the server starts its MCP app."""
    off = mcp_asgi.TransportSecuritySettings(enable_dns_rebinding_protection=False)
    monkeypatch.setattr(mcp_asgi, "host_check", lambda: off)


@pytest.mark.sabotage
def test_sabotage_without_the_host_check_a_rebound_host_runs_the_tool(
    unchecked_hosts, app_server, owner
):
    response = post_tool_call(app_server, f"Bearer {owner.token}", host="rebound.example")
    assert response.status_code == 200
    assert "the tool ran" in response.text


def test_the_host_check_takes_allowed_hosts_on_any_port(settings):
    settings.ALLOWED_HOSTS = ["undoable.example", ".corp.example"]
    checked = mcp_asgi.host_check()
    assert checked.enable_dns_rebinding_protection
    assert checked.allowed_hosts == [
        "undoable.example", "undoable.example:*", "corp.example", "corp.example:*",
    ]  # fmt: skip
    assert "https://undoable.example:*" in checked.allowed_origins


def test_allowed_hosts_star_turns_the_host_check_off_as_it_does_djangos(settings):
    settings.ALLOWED_HOSTS = ["*"]
    assert not mcp_asgi.host_check().enable_dns_rebinding_protection
