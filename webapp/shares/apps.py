from django.apps import AppConfig


class SharesConfig(AppConfig):
    name = "webapp.shares"
    label = "shares"
