"""ASGI entry point: HTTP through Django, websockets through Channels (origin-checked)."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

# What django.core.asgi.get_asgi_application does, with the handler whose requests their
# reference counts free (webapp/server/asgi_handler.py).
django.setup(set_prefix=False)

from webapp.server.asgi_handler import AcyclicASGIHandler  # noqa: E402

django_asgi_app = AcyclicASGIHandler()

from webapp.rlimits import open_files_limit_raise  # noqa: E402

# Here rather than in webapp.server.serve, so that every server of the app does it; logged now that
# Django has set up logging.
open_files_limit_raise()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from webapp.mcp_server import MCP_PATH  # noqa: E402
from webapp.mcp_server.asgi import mcp_endpoint  # noqa: E402
from webapp.routing import SameOriginValidator, websocket_urlpatterns  # noqa: E402
from webapp.server.api_asgi import api_application, route_exact, route_http  # noqa: E402
from webapp.server.request_bodies import BodyGuard  # noqa: E402


def http_application(*, exec_direct: bool = True) -> BodyGuard:
    """Every request's body judged from its head before Django would spool it. MCP_PATH: the
    agent API as MCP tools (webapp.mcp_server), bearer tokens and no CSRF, as /api/v1/.
    `exec_direct`: see webapp.server.api_asgi.api_application."""
    api = api_application(exec_direct=exec_direct)
    return BodyGuard(
        route_exact({MCP_PATH: mcp_endpoint}, route_http(site=django_asgi_app, api=api))
    )


application = ProtocolTypeRouter(
    {
        "http": http_application(),
        # Scheme, host and port of the Origin must be the site's own (see webapp/routing.py).
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        # Starts what MCP needs for as long as the server runs (webapp.mcp_server.asgi).
        "lifespan": mcp_endpoint.lifespan,
    }
)

# Import every view (and what they import: the LLM client, Redis, the API schemas) now rather
# than at the first request, so that the freeze below covers them too.
get_resolver().url_patterns  # noqa: B018
# Everything loaded so far lives as long as the process: keep it out of the cyclic garbage
# collector's full passes. Each of those walked all ~190,000 objects, ~140 ms on a 2-core host,
# a stall for every request in flight, every few hundred requests (`make bench`'s p99).
gc.freeze()
