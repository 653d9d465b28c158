from django.apps import AppConfig


class QueriesConfig(AppConfig):
    name = "webapp.queries"
    label = "queries"

    def ready(self) -> None:
        from webapp.queries import checks  # noqa: F401  (registers the system checks)
