from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "webapp.agents"
    label = "agents"

    def ready(self) -> None:
        from webapp.agents.recent_tokens import connect_signals

        connect_signals()
