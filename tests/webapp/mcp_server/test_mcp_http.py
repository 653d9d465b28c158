"""The SDK's own MCP client against the product's server at /mcp (streamable HTTP)."""

from __future__ import annotations

import base64
import logging

import pytest
from asgiref.sync import sync_to_async
from mcp_types import ImageContent

from tests.webapp.actions.test_action_undo import database_dump
from tests.webapp.mcp_server.mcp_clients import answer, mcp_over_http

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root", "sessions"),
]

TOOLS = {
    "exec", "session_new", "session_exec", "session_files",
    "action_run", "action_keep", "action_discard", "action_undo", "action_status",
    "workspace_new", "workspace_files", "workspace_read", "workspace_write",
}  # fmt: skip


async def test_it_lists_the_tools_and_execs(app_server, owner):
    async with mcp_over_http(app_server, owner.token) as mcp:
        listed = await mcp.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        ran = answer(await mcp.call_tool("exec", {"code": "print(6 * 7)"}))
    assert ran["stdout"] == "42\n"
    assert ran["exit_code"] == 0


async def test_an_fs_action_discarded_or_undone_leaves_no_file(app_server, owner, workspaces_root):
    async with mcp_over_http(app_server, owner.token) as mcp:
        for take_back in ("action_discard", "action_undo"):
            code = "open('joke.txt', 'w').write('knock knock')"
            action = answer(await mcp.call_tool("action_run", {"kind": "fs", "forward_code": code}))
            assert action["status"] == "pending"
            assert [e["path"] for e in action["change"]["entries"]] == ["joke.txt"]
            gone = answer(await mcp.call_tool(take_back, {"action_id": action["id"]}))
            assert gone["status"] == "discarded"
            status = answer(await mcp.call_tool("action_status", {"action_id": action["id"]}))
            assert status["status"] == "discarded"
            folder = workspaces_root / str(action["workspace"]) / "files"
            assert folder.is_dir() and not (folder / "joke.txt").exists()


async def test_a_kept_fs_action_writes_its_file(app_server, owner, workspaces_root):
    async with mcp_over_http(app_server, owner.token) as mcp:
        code = "open('joke.txt', 'w').write('knock knock')"
        action = answer(await mcp.call_tool("action_run", {"kind": "fs", "forward_code": code}))
        kept = answer(await mcp.call_tool("action_keep", {"action_id": action["id"]}))
    assert kept["status"] == "kept"
    folder = workspaces_root / str(action["workspace"]) / "files"
    assert (folder / "joke.txt").read_text() == "knock knock"


async def test_a_session_keeps_its_state_between_two_cells(app_server, owner):
    async with mcp_over_http(app_server, owner.token) as mcp:
        session = answer(await mcp.call_tool("session_new", {}))
        first = {"session_id": session["id"], "code": "x = 20\nopen('kept.txt', 'w').write('1')"}
        answer(await mcp.call_tool("session_exec", first))
        second = answer(
            await mcp.call_tool("session_exec", {"session_id": session["id"], "code": "x + 22"})
        )
        files = answer(await mcp.call_tool("session_files", {"session_id": session["id"]}))
    assert second["stdout"] == "42\n"
    assert "kept.txt" in [entry["name"] for entry in files["entries"]]


async def test_a_plot_comes_back_as_image_content(app_server, owner):
    plot = "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\n"
    async with mcp_over_http(app_server, owner.token) as mcp:
        ran = await mcp.call_tool("exec", {"code": plot})
    answer(ran)
    images = [block for block in ran.content if isinstance(block, ImageContent)]
    assert [image.mime_type for image in images] == ["image/png"]
    assert base64.b64decode(images[0].data).startswith(b"\x89PNG\r\n\x1a\n")


async def test_refusals_are_tool_errors_with_the_apis_message(app_server, owner):
    async with mcp_over_http(app_server, owner.token) as mcp:
        missing = await mcp.call_tool("action_status", {"action_id": 999_999})
        bad_kind = await mcp.call_tool("action_run", {"kind": "shell", "forward_code": "1"})
        empty = await mcp.call_tool("action_run", {"kind": "python", "forward_code": "  "})
        no_session = await mcp.call_tool("session_exec", {"session_id": "nope", "code": "1"})
    assert missing.is_error and "not found" in missing.content[0].text
    assert bad_kind.is_error
    assert empty.is_error and "forward_code is empty" in empty.content[0].text
    assert no_session.is_error and "no such session" in no_session.content[0].text


async def test_another_users_action_and_session_are_not_found(app_server, owner, stranger):
    async with mcp_over_http(app_server, owner.token) as mcp:
        code = "open('x', 'w').write('x')"
        action = answer(await mcp.call_tool("action_run", {"kind": "fs", "forward_code": code}))
        session = answer(await mcp.call_tool("session_new", {}))
    async with mcp_over_http(app_server, stranger.token) as theirs:
        calls = [
            (name, {"action_id": action["id"]})
            for name in ("action_status", "action_keep", "action_discard", "action_undo")
        ]
        calls += [("session_exec", {"session_id": session["id"], "code": "1"})]
        calls += [("session_files", {"session_id": session["id"]})]
        for name, arguments in calls:
            refused = await theirs.call_tool(name, arguments)
            assert refused.is_error, name
            assert "not found" in refused.content[0].text or "no such" in refused.content[0].text
    async with mcp_over_http(app_server, owner.token) as mcp:
        still = answer(await mcp.call_tool("action_status", {"action_id": action["id"]}))
    assert still["status"] == "pending"


async def test_exec_takes_the_apis_options(app_server, owner):
    arguments = {
        "code": "import sys\nprint(open('in.txt').read() + sys.stdin.read())\n6 * 7",
        "files": {"in.txt": "from a file, "},
        "stdin": "from stdin",
        "interpreter_mode": True,
        "language": "python",
        "timeout_s": 10,
    }
    async with mcp_over_http(app_server, owner.token) as mcp:
        ran = answer(await mcp.call_tool("exec", arguments))
    assert ran["stdout"] == "from a file, from stdin\n42\n"


async def test_a_credential_given_to_a_tool_is_never_logged_or_stored(app_server, owner, caplog):
    caplog.set_level(logging.DEBUG)
    canary = "mcp-canary-3f9a1c"
    code = "import os\nprint(len(os.environ['API_KEY']))"
    async with mcp_over_http(app_server, owner.token) as mcp:
        given = {"kind": "python", "forward_code": code, "credentials": {"API_KEY": canary}}
        action = answer(await mcp.call_tool("action_run", given))
        refused = await mcp.call_tool("action_run", {**given, "kind": "nope"})
    assert action["stdout"] == f"{len(canary)}\n"
    assert refused.is_error
    # The server's logs; the test's own MCP client (mcp.client.*, in this process) logs what
    # it sends at DEBUG, which the stdio relay leaves at Python's default (WARNING).
    server_logs = [r for r in caplog.records if not r.name.startswith("mcp.client")]
    assert [r.name for r in server_logs if canary in f"{r.getMessage()} {r.__dict__}"] == []
    assert canary.encode() not in await sync_to_async(database_dump)()
