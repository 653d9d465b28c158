"""action_run's idempotency_key: an agent's retry of the same call never runs an action twice."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from tests.webapp.mcp_server.mcp_clients import answer, mcp_over_http
from webapp.actions.models import Action

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root"),
]
APPEND = "print('ran')"


async def run_twice(app_server: str, token: str) -> tuple[dict, dict]:
    call = {"kind": "python", "forward_code": APPEND, "idempotency_key": "retry-7c1e"}
    async with mcp_over_http(app_server, token) as mcp:
        first = answer(await mcp.call_tool("action_run", call))
        again = answer(await mcp.call_tool("action_run", call))
    return first, again


async def test_deny_the_same_key_twice_runs_one_action(app_server, owner):
    first, again = await run_twice(app_server, owner.token)
    assert again["id"] == first["id"] and again["stdout"] == "ran\n"
    assert await sync_to_async(Action.objects.count)() == 1


@pytest.mark.sabotage
async def test_sabotage_without_the_key_a_retry_runs_a_second_action(
    app_server, owner, monkeypatch
):
    monkeypatch.setattr("webapp.mcp_server.tools.idempotency_key_checked", lambda raw: "")
    first, again = await run_twice(app_server, owner.token)
    assert again["id"] != first["id"]
    assert await sync_to_async(Action.objects.count)() == 2


async def test_the_same_key_for_another_call_and_a_bad_key_are_refused(app_server, owner):
    async with mcp_over_http(app_server, owner.token) as mcp:
        call = {"kind": "python", "forward_code": "print(1)", "idempotency_key": "k-1"}
        answer(await mcp.call_tool("action_run", call))
        other = await mcp.call_tool("action_run", {**call, "forward_code": "print(2)"})
        bad = await mcp.call_tool("action_run", {**call, "idempotency_key": "a\nb"})
    assert other.is_error and "(409)" in other.content[0].text  # type: ignore[union-attr]
    assert bad.is_error and "Idempotency-Key must be printable" in bad.content[0].text  # type: ignore[union-attr]
