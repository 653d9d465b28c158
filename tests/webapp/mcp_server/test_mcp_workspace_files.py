"""The workspace file tools: through the API's own functions, the owner's workspaces alone."""

from __future__ import annotations

import base64

import pytest

from tests.webapp.mcp_server.mcp_clients import answer, mcp_over_http

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root"),
]


def message(result) -> str:
    assert result.is_error
    return str(result.content[0].text)


async def test_an_agent_writes_lists_and_reads_files_an_fs_action_then_sees(app_server, owner):
    async with mcp_over_http(app_server, owner.token) as mcp:
        workspace = answer(await mcp.call_tool("workspace_new", {}))["id"]
        written = {"workspace_id": workspace, "path": "notes/a.txt", "text": "hello"}
        assert answer(await mcp.call_tool("workspace_write", written))["size"] == 5
        raw = base64.b64encode(b"\xff\x00").decode()
        binary = {"workspace_id": workspace, "path": "b.bin", "base64_data": raw}
        answer(await mcp.call_tool("workspace_write", binary))
        listed = answer(await mcp.call_tool("workspace_files", {"workspace_id": workspace}))
        code = "print(open('notes/a.txt').read())"
        action = {"kind": "fs", "forward_code": code, "workspace": workspace}
        ran = answer(await mcp.call_tool("action_run", action))
        read = {"workspace_id": workspace, "path": "notes/a.txt"}
        text = answer(await mcp.call_tool("workspace_read", read))
        blob = answer(await mcp.call_tool("workspace_read", {**read, "path": "b.bin"}))
    assert [e["path"] for e in listed["entries"]] == ["b.bin", "notes/a.txt"]
    assert ran["stdout"] == "hello\n"
    assert (text["text"], blob["base64_data"]) == ("hello", raw)


async def test_deny_another_users_workspace_is_not_found(app_server, owner, stranger):
    async with mcp_over_http(app_server, owner.token) as mcp:
        workspace = answer(await mcp.call_tool("workspace_new", {}))["id"]
    async with mcp_over_http(app_server, stranger.token) as mcp:
        listed = await mcp.call_tool("workspace_files", {"workspace_id": workspace})
        write = {"workspace_id": workspace, "path": "x.txt", "text": "x"}
        written = await mcp.call_tool("workspace_write", write)
    assert message(listed).endswith(": not found (404)")
    assert message(written).endswith(": not found (404)")


async def test_a_path_out_of_the_workspace_and_bad_content_are_refused(app_server, owner):
    async with mcp_over_http(app_server, owner.token) as mcp:
        workspace = answer(await mcp.call_tool("workspace_new", {}))["id"]
        out = {"workspace_id": workspace, "path": "../../escape.txt", "text": "x"}
        escaped = await mcp.call_tool("workspace_write", out)
        both = await mcp.call_tool("workspace_write", {**out, "path": "a", "base64_data": "eA=="})
        bad = {"workspace_id": workspace, "path": "a", "base64_data": "not base64!"}
        garbled = await mcp.call_tool("workspace_write", bad)
    assert message(escaped).endswith("(400)")
    assert "give one of text or base64_data" in message(both)
    assert "not base64" in message(garbled)
