"""An async Django view served straight from ASGI, without Django's handler or ninja: the route
POST /api/v1/exec takes, the API's hottest (webapp.server.api_asgi).

Django's handler and ninja's operation (webapp.agents.exec_api.exec_operation, which the
OpenAPI schema describes) cost a `print(1+1)` exec about 1 ms more of the server's CPU
(docs/architecture.md, "Why exec skips ninja"). The
request and response are still Django's own objects (an ASGIRequest, an HttpResponse), so the
view reads headers, body and host as any Django view does. What the handler did for this view
is kept:

- the body is read in full before the view runs, here capped: a body past `max_body_bytes`
  (declared or sent) is answered 413 without reading the rest;
- the API's middleware (ApiSecurityMiddleware: the host check, the security headers);
- the client's disconnect cancels the view, so a run still waiting for its turn never starts;
- anything unexpected is logged and answered 500 in the API's error shape.

Not kept: the request_started/finished signals (they close the request thread's database
connection; the view's queries run on threads of their own, webapp.agents.auth), URL resolution
and ninja's operation (auth, body parameter, exception handlers), which the view does itself.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from webapp.agents.api_errors import BODY_TOO_LARGE, INTERNAL_ERROR, error_response

logger = logging.getLogger("webapp.agents.api")

Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
View = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


class ClientGone(Exception):
    """The client disconnected before its request was answered."""


class DirectView:
    """The ASGI app serving `view` (HTTP only), inside `middleware`."""

    def __init__(
        self,
        view: View,
        *,
        middleware: Callable[[View], View],
        max_body_bytes: Callable[[], int],
    ) -> None:
        self._view = view
        self._chain = middleware(self._answered)
        self._too_large_chain = middleware(_body_too_large)
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        try:
            body = await read_body(scope, receive, self._max_body_bytes())
        except ClientGone:
            return
        request = ASGIRequest(scope, io.BytesIO(body or b""))
        chain = self._chain if body is not None else self._too_large_chain
        response = await answered_unless_gone(chain, request, receive)
        if response is not None:
            await send_response(send, response)

    async def _answered(self, request: HttpRequest) -> HttpResponseBase:
        try:
            return await self._view(request)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("agent api error", extra={"path": request.path})
            return error_response(500, INTERNAL_ERROR)


async def answered_unless_gone(
    chain: View, request: HttpRequest, receive: Receive
) -> HttpResponseBase | None:
    """`chain`'s response, or None if the client left first: its disconnect cancels the chain."""
    answering = asyncio.current_task()
    assert answering is not None
    gone = asyncio.Event()
    watcher = asyncio.get_running_loop().create_task(disconnect_watch(receive, answering, gone))
    try:
        return await chain(request)
    except asyncio.CancelledError:
        if not gone.is_set():
            raise  # cancelled by the server, not by the client's disconnect
        answering.uncancel()
        return None
    finally:
        watcher.cancel()


async def disconnect_watch(
    receive: Receive, answering: asyncio.Task[Any], gone: asyncio.Event
) -> None:
    """Once the body is read, the server's next message is the client's disconnect."""
    message = await receive()
    if message["type"] == "http.disconnect":
        gone.set()
        answering.cancel()


async def _body_too_large(request: HttpRequest) -> HttpResponseBase:
    return error_response(413, BODY_TOO_LARGE)


async def read_body(scope: dict[str, Any], receive: Receive, max_bytes: int) -> bytes | None:
    """The request's body; None when it is larger than `max_bytes` (declared or sent), the rest
    left unread. ClientGone if the client disconnects first."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > max_bytes:
            return None
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        part = message.get("body", b"")
        size += len(part)
        if size > max_bytes:
            return None
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def send_response(send: Send, response: HttpResponseBase) -> None:
    """`response` (a plain HttpResponse: no stream, no cookies) as ASGI messages."""
    assert isinstance(response, HttpResponse) and not response.cookies, response
    body = response.content
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
    headers.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
