from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "webapp.workspaces"
    label = "workspaces"
