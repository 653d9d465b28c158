from django.urls import path

from webapp.workspaces.consumers import WaitingConsumer

websocket_urlpatterns = [
    path("ws/changes-waiting/", WaitingConsumer.as_asgi()),
]
