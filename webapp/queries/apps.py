from django.apps import AppConfig


class QueriesConfig(AppConfig):
    name = "webapp.queries"
    label = "queries"
