from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "webapp.audit"
    label = "audit"

    def ready(self) -> None:
        from webapp.audit import checks  # noqa: F401 - registers the key check
