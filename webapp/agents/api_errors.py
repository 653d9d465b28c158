"""The agent API's error answers, one shape for every endpoint: JSON {"error": "..."} with the
status, Retry-After when the client should come back later, WWW-Authenticate on a 401.

Used by the ninja API's exception handlers (webapp.agents.api), by the exec endpoint, which is
served without ninja (webapp.server.direct_view), and, as ASGI messages (error_answer), by the
layers that answer before Django sees the request (webapp.server.request_bodies,
webapp.server.refused_early, webapp.mcp_server).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from django.conf import settings
from django.http import JsonResponse

from webapp.admission.ratelimit import QuotaExceeded
from webapp.agents.schemas import ApiError

UNAUTHENTICATED = "missing, invalid or revoked API token"
BODY_TOO_LARGE = "request body is too large"
NOT_FOUND = "not found"
INTERNAL_ERROR = "internal error"


def error_response(status: int, message: str, *, retry_after_s: int | None = None) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    if retry_after_s is not None:
        response["Retry-After"] = str(retry_after_s)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def method_not_allowed(method: str, *, allowed: str) -> JsonResponse:
    """405 for `method` on a path that takes only the comma-separated `allowed` ones."""
    response = error_response(405, f"{method} is not allowed here; use {allowed}")
    response["Allow"] = allowed
    return response


def refusal_response(exc: ApiError | QuotaExceeded) -> JsonResponse:
    """The answer to a request refused on purpose: ApiError's status, or 429 for a quota."""
    if isinstance(exc, QuotaExceeded):
        return error_response(429, str(exc), retry_after_s=exc.retry_after_s)
    return error_response(exc.status, exc.message, retry_after_s=exc.retry_after_s)


Send = Callable[[dict[str, Any]], Awaitable[None]]


def security_headers() -> list[tuple[bytes, bytes]]:
    """What SecurityMiddleware and XFrameOptionsMiddleware (ApiSecurityMiddleware on the API)
    set on every answer."""
    headers = [(b"x-frame-options", settings.X_FRAME_OPTIONS.encode())]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        headers.append((b"referrer-policy", str(settings.SECURE_REFERRER_POLICY).encode()))
    return headers


async def error_answer(
    send: Send, status: int, message: str, *, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Send `status` with {"error": message} and `headers`."""
    body = json.dumps({"error": message}).encode()
    start = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
        *security_headers(),
    ]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})
