"""webapp.asgi's application without its request-body guard (webapp.server.request_bodies), as the
app was before bodies were judged from their heads: for the sabotage tests, which start the real
server with it (`python -m webapp.server.serve tests.webapp.unguarded_asgi:application`)."""

from channels.routing import ProtocolTypeRouter

from webapp.asgi import application as guarded

application = ProtocolTypeRouter(
    {**guarded.application_mapping, "http": guarded.application_mapping["http"].app}
)
