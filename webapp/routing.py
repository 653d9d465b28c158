"""Websocket routes and the origin check in front of them.

Cookies are not scoped by port, so a page served from another port of the same host (another
app, a dev server, anything a local user can start) sends the victim's session cookie with its
websocket handshake. Channels' AllowedHostsOriginValidator compares only the host name, which
let such a page read run output. SameOriginValidator accepts a handshake only when its Origin is
the site's own origin — scheme, host and port of the request itself, the way Django's CSRF check
compares them — or one of CSRF_TRUSTED_ORIGINS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from webapp.runs.routing import websocket_urlpatterns as run_routes
from webapp.workspaces.routing import websocket_urlpatterns as waiting_routes

__all__ = ["SameOriginValidator", "websocket_urlpatterns"]

websocket_urlpatterns = [*run_routes, *waiting_routes]

DEFAULT_PORTS = {"http": 80, "https": 443}
# (scheme, host, port); a host starting with "." matches the domain and its subdomains.
Origin = tuple[str, str, int]


class SameOriginValidator:
    """ASGI middleware for websockets: deny a handshake whose Origin is not the site's own."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator only guards websocket connections")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = _headers(scope)
    origin = _parse(headers.get("origin", ""))
    if origin is None:
        return False  # browsers always send one; "null" or a missing one is not our page
    own = _own_origin(scope, headers)
    allowed = _trusted_origins() if own is None else [own, *_trusted_origins()]
    return any(_matches(origin, candidate) for candidate in allowed)


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        # A repeated Origin or Host is ambiguous: keep none, so the handshake is refused.
        key = name.decode("latin1").lower()
        headers[key] = "" if key in headers else value.decode("latin1")
    return headers


def _own_origin(scope: dict[str, Any], headers: dict[str, str]) -> Origin | None:
    """The origin the browser reached this site at: the Host header (when allowed) and scheme."""
    host = headers.get("host", "")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None  # also stops DNS rebinding: evil.test:8000 pointed at us is not allowed
    return _parse(f"{'https' if _is_secure(scope, headers) else 'http'}://{host}")


def _is_secure(scope: dict[str, Any], headers: dict[str, str]) -> bool:
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy_header = settings.SECURE_PROXY_SSL_HEADER
    if proxy_header:
        name, secure_value = proxy_header
        # Django's META name (HTTP_X_FORWARDED_PROTO) back to the header's name.
        header = name.removeprefix("HTTP_").replace("_", "-").lower()
        return headers.get(header, "").split(",")[0].strip() == secure_value
    return False


def _trusted_origins() -> list[Origin]:
    origins = (_parse(entry, wildcard=True) for entry in settings.CSRF_TRUSTED_ORIGINS)
    return [origin for origin in origins if origin is not None]


def _matches(origin: Origin, allowed: Origin) -> bool:
    scheme, host, port = allowed
    host_ok = origin[1].endswith(host) if host.startswith(".") else origin[1] == host
    return host_ok and origin[0] == scheme and _same_port(origin[2], port)


def _same_port(a: int, b: int) -> bool:
    # Its own function so the sabotage test can show what ignoring the port lets through.
    return a == b


def _parse(text: str, *, wildcard: bool = False) -> Origin | None:
    if wildcard and "://*." in text:
        text = text.replace("://*.", "://", 1)
        prefix = "."
    else:
        prefix = ""
    try:
        parts = urlsplit(text.strip())
        port = _port(parts)
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or port is None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    return parts.scheme, prefix + parts.hostname.lower(), port


def _port(parts: SplitResult) -> int | None:
    return parts.port if parts.port is not None else DEFAULT_PORTS.get(parts.scheme)
