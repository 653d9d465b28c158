"""Local account forms."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.core.exceptions import ValidationError

from webapp.accounts import throttle


class SignupForm(UserCreationForm):
    """Username and password; Django's password validators apply."""


class LoginThrottleMixin(AuthenticationForm):
    """Refuses at once (no password check) while the username or the client address is locked
    out after too many wrong passwords (webapp.accounts.throttle); counts wrong passwords."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": "Too many failed sign-in attempts for this account or from this address. "
        "Try again in %(wait)s.",
    }
    retry_after_s: int | None = None

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        address = throttle.client_address(self.request) if self.request else ""
        self.retry_after_s = throttle.login_lockout_s(username=username, address=address)
        if self.retry_after_s is not None:
            raise ValidationError(
                self.error_messages["throttled"],
                code="throttled",
                params={"wait": _minutes(self.retry_after_s)},
            )
        try:
            cleaned = super().clean()
        except ValidationError as exc:
            if exc.code == "invalid_login":
                throttle.login_failed(username=username, address=address)
            raise
        if self.user_cache is not None:  # not a form with the password left out
            throttle.login_succeeded(username=username)
        return cleaned


class ThrottledAuthenticationForm(LoginThrottleMixin):
    """The local sign-in form."""


class ThrottledAdminAuthenticationForm(LoginThrottleMixin, AdminAuthenticationForm):
    """The admin's sign-in form: the same passwords, so the same throttle."""

    error_messages = {**AdminAuthenticationForm.error_messages, **LoginThrottleMixin.error_messages}


def _minutes(seconds: int) -> str:
    minutes = max(1, round(seconds / 60))
    return "1 minute" if minutes == 1 else f"{minutes} minutes"
