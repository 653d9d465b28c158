"""The answer to an MCP request without an active API token, sent before any MCP code runs.

A 401 with the bearer challenge, as the agent API gives, but its body a JSON-RPC error: MCP
clients (the SDK's among them) show a JSON-RPC error's message to their user, where an
`{"error": ...}` body would reach them as a bare "error response".
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from webapp.agents.api_errors import UNAUTHENTICATED, security_headers

Send = Callable[[dict[str, Any]], Awaitable[None]]
# JSON-RPC leaves -32000 to -32099 to servers; the SDK's own clients expect no particular one.
UNAUTHENTICATED_CODE = -32001


async def unauthenticated_answer(send: Send) -> None:
    error = {"code": UNAUTHENTICATED_CODE, "message": f"Undoable: {UNAUTHENTICATED}"}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b'Bearer realm="api"'),
        *security_headers(),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
