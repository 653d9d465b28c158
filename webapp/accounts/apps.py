from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "webapp.accounts"
    label = "accounts"

    def ready(self) -> None:
        from django.contrib import admin

        from webapp.accounts.forms import ThrottledAdminAuthenticationForm

        # The admin's sign-in checks the same passwords: it must not be a way around the throttle.
        admin.site.login_form = ThrottledAdminAuthenticationForm
