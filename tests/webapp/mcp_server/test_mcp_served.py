"""/mcp on the server as the product starts it (`python -m webapp.server.serve`, its own process):
the lifespan starts MCP's session manager there too."""

from __future__ import annotations

from tests.webapp.live_server import serving, template_fixture  # noqa: F401
from tests.webapp.mcp_server.mcp_clients import answer, mcp_over_http


async def test_the_served_app_answers_mcp_tool_calls(template, tmp_path):
    with serving(template, tmp_path, open_files=(1024, 4096)) as url:
        async with mcp_over_http(url, template.token) as mcp:
            ran = answer(await mcp.call_tool("exec", {"code": "print(6 * 7)"}))
    assert ran["stdout"] == "42\n"
