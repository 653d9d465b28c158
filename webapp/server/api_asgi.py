"""The ASGI handler for the agent API (/api/v1/): Django's own, with a middleware chain of its own.

Agents authenticate every request with a bearer token and get no cookies, so the browser's
middleware (sessions, CSRF, login, messages, social-auth errors) has nothing to do here. Under
ASGI it is not free either: each of those sync middlewares hops to a worker thread and back
twice per request, about 3 ms of a 5 ms `print(1+1)` round trip on a 2-core machine. What
the API does need from the site's stack is kept, natively async: the ALLOWED_HOSTS check and
the security headers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import markcoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from webapp.agents import conf
from webapp.agents.api_errors import NOT_FOUND, error_response, method_not_allowed
from webapp.agents.exec_api import exec_view
from webapp.server.asgi_handler import AcyclicASGIHandler
from webapp.server.direct_view import DirectView
from webapp.server.refused_early import refused_early

API_PREFIX = "/api/v1/"
EXEC_PATH = "/api/v1/exec"
SESSIONS_PREFIX = "/api/v1/sessions/"
security_logger = logging.getLogger("django.security.DisallowedHost")


class AsyncMiddleware:
    """A natively async Django middleware: no thread hop around it."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        raise NotImplementedError


class ApiSecurityMiddleware(AsyncMiddleware):
    """Host validation and the headers SecurityMiddleware and XFrameOptionsMiddleware set."""

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            request.get_host()
        except DisallowedHost:
            # Logged as Django logs it for the site; answered in the API's own error shape.
            security_logger.warning("api request for a host outside ALLOWED_HOSTS")
            return JsonResponse({"error": "host not allowed"}, status=400)
        response = await self.get_response(request)
        if settings.SECURE_CONTENT_TYPE_NOSNIFF:
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if settings.SECURE_REFERRER_POLICY:
            response.headers.setdefault("Referrer-Policy", settings.SECURE_REFERRER_POLICY)
        response.headers.setdefault("X-Frame-Options", settings.X_FRAME_OPTIONS)
        return response


class ApiErrorShapeMiddleware(AsyncMiddleware):
    """The answers Django and ninja give on their own, in the API's error shape: 404 for a path
    the API does not have (Django's HTML page otherwise), 405 for a method a path does not take
    (ninja's HTML `HttpResponseNotAllowed` otherwise), `Allow` kept."""

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = await self.get_response(request)
        if response.status_code not in (404, 405) or is_json(response):
            return response
        if response.status_code == 404:
            return error_response(404, NOT_FOUND)
        return method_not_allowed(request.method or "", allowed=response["Allow"])


def is_json(response: HttpResponseBase) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


class ApiASGIHandler(AcyclicASGIHandler):
    """Serves API_PREFIX; URL resolution, views and error handling are Django's as usual."""

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        """Django's, without its ThreadSensitiveContext.

        That context gives each request a thread of its own for its thread-sensitive sync
        calls, started and joined per request. Here those calls are the request signals and the
        sessions' few short queries; they share asgiref's one long-lived thread instead, ~0.7 ms
        less server CPU per request (docs/benchmarks.md). The views' blocking work runs on the
        API's own thread pools either way.
        """
        if scope["type"] != "http":
            raise ValueError(f"the API serves HTTP only, not {scope['type']}")
        await self.handle(scope, receive, send)  # type: ignore[no-untyped-call]

    def load_middleware(self, is_async: bool = False) -> None:
        # The attributes BaseHandler.load_middleware fills from settings.MIDDLEWARE.
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        view = convert_exception_to_response(self._get_response_async)  # type: ignore[attr-defined]
        self._middleware_chain = convert_exception_to_response(
            ApiSecurityMiddleware(ApiErrorShapeMiddleware(view))
        )


def api_application(*, exec_direct: bool = True) -> Callable[..., Awaitable[None]]:
    """The API's ASGI app as the server runs it: a refused user's run requests are answered in
    front of Django (webapp.server.refused_early); /api/v1/exec is served by its view directly
    (webapp.server.direct_view), everything else by ApiASGIHandler. `exec_direct=False`: exec
    through ApiASGIHandler and its ninja operation too, as `make bench` compares them
    (tests/bench/bench_api.py, docs/architecture.md)."""
    if not exec_direct:
        return refused_early(ApiASGIHandler())
    exec_endpoint = DirectView(
        exec_view,
        middleware=ApiSecurityMiddleware,
        max_body_bytes=lambda: conf.get_int("AGENTS_MAX_BODY_BYTES"),
    )
    return refused_early(route_exact({EXEC_PATH: exec_endpoint}, ApiASGIHandler()))


def api_body_cap(scope: dict[str, Any]) -> int:
    """The most bytes a request body to the API may have (webapp.server.request_bodies): a session
    file's cap for a file put into a session, AGENTS_MAX_BODY_BYTES for any other."""
    if scope.get("method") == "PUT":
        session_id, _, tail = scope["path"].removeprefix(SESSIONS_PREFIX).partition("/")
        if scope["path"].startswith(SESSIONS_PREFIX) and session_id and tail.startswith("files/"):
            return conf.get_int("AGENTS_SESSION_MAX_FILE_BYTES")
    return conf.get_int("AGENTS_MAX_BODY_BYTES")


def route_exact(
    routes: dict[str, Callable[..., Awaitable[None]]], rest: Callable[..., Awaitable[None]]
) -> Callable[..., Awaitable[None]]:
    """One ASGI app: each path of `routes` (exactly) to its app, every other path to `rest`."""

    async def app(scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        await routes.get(scope["path"], rest)(scope, receive, send)

    return app


def route_http(
    site: Callable[..., Awaitable[None]], api: Callable[..., Awaitable[None]]
) -> Callable[..., Awaitable[None]]:
    """One ASGI app: API_PREFIX to `api`, everything else (/api/docs too) to `site`."""

    async def app(scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        target = api if scope["path"].startswith(API_PREFIX) else site
        await target(scope, receive, send)

    return app
