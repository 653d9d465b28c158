"""MCP over streamable HTTP at MCP_PATH: the SDK's app behind the API's bearer token.

Served in the ASGI layer beside the agent API (webapp.asgi), so the site's sessions and CSRF
never see it: an agent authenticates each request with its API token, as on /api/v1/. The SDK
runs stateless (each POST is a whole exchange: nothing is held between requests, so any web
process can answer) and answers JSON rather than an event stream. Its session manager needs a
task group that outlives requests: the ASGI lifespan starts it (webapp.server.serve runs uvicorn
with lifespan on) and a new one at each startup, since a manager runs once.
"""

from __future__ import annotations

from django.conf import settings
from django.core import signals
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from webapp.agents import conf
from webapp.agents.api_errors import error_answer
from webapp.agents.auth import token_for_secret
from webapp.agents.bearers import bearer_secret
from webapp.mcp_server import MCP_PATH
from webapp.mcp_server.answers import unauthenticated_answer
from webapp.mcp_server.tools import SCOPE_TOKEN, server


def host_check() -> TransportSecuritySettings:
    """The SDK's DNS-rebinding check (Host and Origin headers) from ALLOWED_HOSTS.

    The SDK matches a host exactly or as `name:*` (any port); a Django pattern `.example.com`
    (the name and its subdomains) can only be given as its bare name here, and `*` turns the
    check off as it turns Django's off.
    """
    names = [h.removeprefix(".") for h in settings.ALLOWED_HOSTS]
    if "*" in names:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = [form for name in names for form in (name, f"{name}:*")]
    origins = [f"{scheme}://{host}" for scheme in ("http", "https") for host in hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class McpEndpoint:
    """ASGI app: `lifespan` starts the SDK's session manager; HTTP requests need an active API
    token (401 otherwise, before the SDK reads a byte), which the tools find in the scope."""

    def __init__(self) -> None:
        self._app: ASGIApp | None = None

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=host_check(),
            max_request_body_size=conf.get_int("AGENTS_MAX_BODY_BYTES"),
        )
        self._app = app
        try:
            await app(scope, receive, send)  # Starlette runs the manager for the lifespan
        finally:
            if self._app is app:
                self._app = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        secret = bearer_secret(dict(scope))
        token = await token_for_secret(secret) if secret else None
        if token is None:
            await unauthenticated_answer(send)
            return
        if self._app is None:
            await error_answer(send, 503, "MCP is not started: the server runs without lifespan")
            return
        # As Django's handler does around a request: its receivers close the database
        # connections the tools' sync calls use when they are broken or past their age.
        await signals.request_started.asend(sender=self.__class__, scope=scope)
        try:
            await self._app({**scope, SCOPE_TOKEN: token}, receive, send)
        finally:
            await signals.request_finished.asend(sender=self.__class__)


mcp_endpoint = McpEndpoint()
