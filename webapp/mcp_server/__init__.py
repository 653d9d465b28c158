"""The agent API as MCP tools, served over streamable HTTP at MCP_PATH (issue 44).

tools.py: the tools, each a thin call into the services the JSON API's views call;
asgi.py: the endpoint (bearer token, host check, the SDK's session manager and its lifespan).
"""

MCP_PATH = "/mcp"
