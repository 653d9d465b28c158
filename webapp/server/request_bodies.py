"""Request bodies, judged from the request head before any app reads them (issue 41).

Django's ASGI handler reads a request's whole body, spooling it to a temporary file past
FILE_UPLOAD_MAX_MEMORY_SIZE, before any middleware, view or upload handler runs: none of them
can refuse a body before it has been received and stored. This layer sits in front of Django
and of the views served without it, and gives every request that has a body, on every route:

- on every route that takes bearer tokens (the agent API, MCP), 401 unless the token is
  active, so a stranger's body is never read;
- 413 when the declared Content-Length is past the route's cap (route_body_cap; a site view
  declares its own with webapp.body_caps.body_cap);
- for a body sent without a length (chunked), 413 as soon as it passes the cap, and the app
  behind sees the client gone, so it stops reading and spools no more.

The server (webapp.server.serve) then reads and drops what is left of a body answered early, within
a bound, so that a client that writes its whole body before it reads (urllib, requests) still
reads the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.urls import Resolver404, resolve

from webapp.agents import conf
from webapp.agents.api_errors import UNAUTHENTICATED, error_answer
from webapp.agents.auth import token_for_secret
from webapp.agents.bearers import bearer_secret
from webapp.body_caps import declared_length, view_body_cap
from webapp.mcp_server import MCP_PATH
from webapp.mcp_server.answers import unauthenticated_answer
from webapp.server.api_asgi import API_PREFIX, api_body_cap
from webapp.workspaces.uploads import MAX_UPLOAD_BYTES

Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

_BEARER_CHALLENGE = (b"www-authenticate", b'Bearer realm="api"')
WORKSPACES_API_PREFIX = API_PREFIX + "workspaces/"


def route_body_cap(scope: dict[str, Any]) -> int:
    """The most bytes the body of a request to this route may have."""
    path: str = scope["path"]
    if _workspace_api_upload(scope):
        return MAX_UPLOAD_BYTES
    if path.startswith(API_PREFIX):
        return api_body_cap(scope)
    if path == MCP_PATH:
        return conf.get_int("AGENTS_MAX_BODY_BYTES")  # a tool's arguments: an API body's cap
    try:
        view = resolve(path).func
    except Resolver404:
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return view_body_cap(view, default=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def _workspace_api_upload(scope: dict[str, Any]) -> bool:
    """A file put into a workspace, or a zip unpacked into one, through the API: they take
    what the page's upload takes (webapp.actions.workspaces_api reads them to that cap)."""
    workspace_id, _, tail = scope["path"].removeprefix(WORKSPACES_API_PREFIX).partition("/")
    if not scope["path"].startswith(WORKSPACES_API_PREFIX) or not workspace_id:
        return False
    method = scope.get("method")
    return (method == "PUT" and tail.startswith("files/")) or (method == "POST" and tail == "zip")


def bearer_route(path: str) -> bool:
    """Whether requests to `path` authenticate with an API token (and no cookie)."""
    return path.startswith(API_PREFIX) or path == MCP_PATH


class BodyGuard:
    """The ASGI app `app`, with the bodies of its HTTP requests judged from their heads first."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        length = declared_length(scope["headers"]) if scope["type"] == "http" else 0
        if length == 0:
            await self.app(scope, receive, send)
            return
        if bearer_route(scope["path"]) and not await _bearer_active(scope):
            if scope["path"] == MCP_PATH:
                await unauthenticated_answer(send)  # in MCP's own error shape
            else:
                await error_answer(send, 401, UNAUTHENTICATED, headers=[_BEARER_CHALLENGE])
            return
        max_bytes = route_body_cap(scope)
        if length is not None and length > max_bytes:
            await _too_large(send, max_bytes)
            return
        if length is None:
            capped = CappedBody(receive, send, max_bytes)
            await self.app(scope, capped.receive, capped.send)
            return
        await self.app(scope, receive, send)


async def _bearer_active(scope: dict[str, Any]) -> bool:
    secret = bearer_secret(scope)
    return bool(secret) and await token_for_secret(secret or "") is not None


async def _too_large(send: Send, max_bytes: int) -> None:
    await error_answer(send, 413, f"request body is too large: at most {max_bytes} bytes")


class CappedBody:
    """receive and send for an app reading a body of unknown length: past `max_bytes` the
    client is answered 413 here and the app is told the client left (Django's handler and
    webapp.server.direct_view then stop without answering); anything it sends after is
    dropped."""

    def __init__(self, receive: Receive, send: Send, max_bytes: int) -> None:
        self._receive = receive
        self._send = send
        self._max_bytes = max_bytes
        self._size = 0
        self._refused = False
        self._response_started = False

    async def receive(self) -> Mapping[str, Any]:
        if self._refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        self._size += len(message.get("body", b""))
        if self._size <= self._max_bytes:
            return message
        self._refused = True
        if not self._response_started:
            self._response_started = True
            await _too_large(self._send, self._max_bytes)
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if self._refused:
            return
        self._response_started = True
        await self._send(message)
