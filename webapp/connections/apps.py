from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    name = "webapp.connections"
    label = "connections"
