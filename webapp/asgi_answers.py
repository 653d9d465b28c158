"""Answers an ASGI layer sends itself, before Django sees the request: JSON {"error": "..."}
(the API's error shape) with the headers Django's security middleware would have added."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from django.conf import settings

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
