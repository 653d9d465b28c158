from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "webapp.actions"
    label = "actions"
