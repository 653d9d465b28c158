"""The agent API's error answers, one shape for every endpoint: JSON {"error": "..."} with the
status, Retry-After when the client should come back later, WWW-Authenticate on a 401.

Used by the ninja API's exception handlers (webapp.agents.api) and by the exec endpoint, which
is served without ninja (webapp.agents.direct_view).
"""

from __future__ import annotations

from django.http import JsonResponse

from webapp.agents.ratelimit import QuotaExceeded
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
