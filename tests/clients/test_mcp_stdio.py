"""`undoable mcp` (undoable_client.mcp_stdio) driven by the MCP SDK's own stdio client: the
server's tools, relayed over stdio to the product's real server."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client

from tests.clients.conftest import CLIENT_SRC
from tests.local_servers import free_port
from tests.webapp.mcp_server.mcp_clients import answer
from tests.webapp.mcp_server.test_mcp_http import TOOLS

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root", "sessions"),
]


@asynccontextmanager
async def mcp_over_stdio(url: str, token: str) -> AsyncIterator[ClientSession]:
    relay = StdioServerParameters(
        command=sys.executable,
        args=["-m", "undoable_client.mcp_stdio"],
        env={
            "UNDOABLE_URL": url,
            "UNDOABLE_TOKEN": token,
            "PYTHONPATH": str(CLIENT_SRC),
            "PATH": os.environ.get("PATH", ""),
        },
    )
    async with stdio_client(relay) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_tools_exec_an_undone_fs_action_and_a_session_over_stdio(
    app_server, owner, workspaces_root
):
    async with mcp_over_stdio(app_server, owner.token) as mcp:
        assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS
        ran = answer(await mcp.call_tool("exec", {"code": "print(6 * 7)"}))
        assert ran["stdout"] == "42\n"

        code = "open('joke.txt', 'w').write('knock knock')"
        action = answer(await mcp.call_tool("action_run", {"kind": "fs", "forward_code": code}))
        assert [e["path"] for e in action["change"]["entries"]] == ["joke.txt"]
        undone = answer(await mcp.call_tool("action_undo", {"action_id": action["id"]}))
        assert undone["status"] == "discarded"
        assert not (workspaces_root / str(action["workspace"]) / "files" / "joke.txt").exists()

        session = answer(await mcp.call_tool("session_new", {}))
        answer(await mcp.call_tool("session_exec", {"session_id": session["id"], "code": "x = 1"}))
        second = {"session_id": session["id"], "code": "x + 41"}
        assert answer(await mcp.call_tool("session_exec", second))["stdout"] == "42\n"


async def test_a_bad_token_over_stdio_is_refused_with_a_clear_message(app_server):
    with pytest.raises(ExceptionGroup) as refused:
        async with mcp_over_stdio(app_server, "udb_not-a-real-token") as mcp:
            await mcp.list_tools()
    (error,) = leaves(refused.value)
    assert isinstance(error, MCPError)
    assert error.error.message == "Undoable: missing, invalid or revoked API token"


def leaves(group: BaseExceptionGroup) -> list[BaseException]:
    return [
        leaf
        for error in group.exceptions
        for leaf in (leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    ]


async def test_a_server_out_of_reach_is_a_clear_error_not_a_hang():
    with pytest.raises(ExceptionGroup) as refused:
        async with mcp_over_stdio(f"http://127.0.0.1:{free_port()}", "udb_any") as mcp:
            await mcp.list_tools()
    (error,) = leaves(refused.value)
    assert isinstance(error, MCPError)
    assert error.error.message == "Undoable: cannot reach 127.0.0.1: ConnectError"
