from webapp.queries.routing import websocket_urlpatterns

__all__ = ["websocket_urlpatterns"]
