"""ASGI entry point: HTTP through Django, websockets through Channels (origin-checked)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.agents.asgi import ApiASGIHandler, route_http  # noqa: E402
from webapp.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": route_http(site=django_asgi_app, api=ApiASGIHandler()),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
