"""`undoable mcp`: MCP over stdio, for MCP clients that start their servers as commands.

A relay, not a second server: every message read on stdin goes to the Undoable server's
streamable-HTTP endpoint (`URL/mcp`, the API token as bearer) and every answer comes back on
stdout, through the MCP SDK's stdio server and its streamable-HTTP client. The tools, their
checks and their limits exist once, on the server.

Needs the `mcp` extra: `pip install 'undoable-client[mcp]'`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterable
from typing import Protocol

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

# A tool call answers when its run has ended: the server's wall-time cap, and then some.
READ_TIMEOUT_S = 300.0


class Sink(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


async def _relay(source: AsyncIterable[SessionMessage | Exception], sink: Sink) -> None:
    async for message in source:
        if isinstance(message, Exception):
            # A line that is not JSON-RPC, or a transport failure the SDK could not answer as
            # a JSON-RPC error: nothing to pass on. The message never holds the token.
            logger.warning("mcp relay: dropped a message: %s", message)
            continue
        await sink.send(message)


class ReachFailuresAnswered(httpx2.AsyncBaseTransport):
    """httpx2's transport, with a request that could not reach the server (refused, reset,
    timed out) answered 502 with a JSON-RPC error: the SDK's client passes that on to the MCP
    client as the request's error, where the exception would end the relay mid-session and
    leave the client waiting."""

    def __init__(self) -> None:
        self._transport = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._transport.handle_async_request(request)
        except httpx2.TransportError as exc:
            message = f"Undoable: cannot reach {request.url.host}: {type(exc).__name__}"
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}
            headers = {"content-type": "application/json"}
            return httpx2.Response(502, headers=headers, json=error, request=request)

    async def aclose(self) -> None:
        await self._transport.aclose()


async def serve(*, url: str, token: str) -> None:
    """Relay MCP between this process's stdio and `url`/mcp until stdin closes."""
    endpoint = url.rstrip("/") + "/mcp"
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=READ_TIMEOUT_S)
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=timeout, transport=ReachFailuresAnswered()
        ) as http,
        streamable_http_client(endpoint, http_client=http) as (from_server, to_server),
        stdio_server() as (from_client, to_client),
        anyio.create_task_group() as relays,
    ):

        async def client_to_server() -> None:
            await _relay(from_client, to_server)
            relays.cancel_scope.cancel()  # stdin closed: the client is done

        relays.start_soon(client_to_server)
        relays.start_soon(_relay, from_server, to_client)


def main(*, url: str, token: str) -> None:
    """Serve MCP over stdio, relayed to the Undoable server at `url` with the API `token`."""
    anyio.run(lambda: serve(url=url, token=token))


if __name__ == "__main__":
    url, token = os.environ.get("UNDOABLE_URL"), os.environ.get("UNDOABLE_TOKEN")
    if not url or not token:
        sys.exit("undoable mcp: set UNDOABLE_URL and UNDOABLE_TOKEN")
    main(url=url, token=token)
