"""The owner's page for one API token's damage limits (linked from the account page's token
list): an HTML form, CSRF-protected, set through the same validation as `manage.py token_limits`.
Another person's token, or a revoked one, answers 404."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.accounts.authed import AuthedHttpRequest
from webapp.actions.limits import (
    KINDS,
    Limits,
    LimitsInvalid,
    cap_from_number,
    names_from_text,
    owned_token,
    token_limits,
    token_limits_set,
)

PATTERNS_HELP = "Comma-separated patterns; empty for any."


class LimitsForm(forms.Form):
    allowed_kinds = forms.CharField(
        required=False, help_text=f"Comma-separated, of {', '.join(KINDS)}; empty for any."
    )
    allowed_hosts = forms.CharField(
        required=False,
        label="Allowed host patterns",
        help_text="e.g. *.slack.com (any port), 127.0.0.1:8080 (that port). " + PATTERNS_HELP,
    )
    allowed_db_targets = forms.CharField(
        required=False,
        label="Allowed db targets",
        help_text="sqlite:PATH or url:CREDENTIAL patterns. " + PATTERNS_HELP,
    )
    actions_per_hour = forms.IntegerField(required=False, help_text="Empty for no cap.")
    pending_at_once = forms.IntegerField(required=False, help_text="Empty for no cap.")
    review_required = forms.BooleanField(
        required=False,
        help_text="Keep through the API is refused; you keep its actions on the Review page.",
    )
    rehearsal_required = forms.BooleanField(
        required=False,
        help_text="fs and db actions must pass a rehearsal (rehearse: true) before they run.",
    )

    @classmethod
    def showing(cls, limits: Limits) -> LimitsForm:
        return cls(
            initial={
                **limits.as_json(),
                **{
                    name: ", ".join(getattr(limits, name))
                    for name in ("allowed_kinds", "allowed_hosts", "allowed_db_targets")
                },
            }
        )

    def limits(self) -> Limits:
        data: dict[str, Any] = self.cleaned_data
        return Limits(
            allowed_kinds=names_from_text(data["allowed_kinds"]),
            allowed_hosts=names_from_text(data["allowed_hosts"]),
            allowed_db_targets=names_from_text(data["allowed_db_targets"]),
            actions_per_hour=cap_from_number(data["actions_per_hour"]),
            pending_at_once=cap_from_number(data["pending_at_once"]),
            review_required=data["review_required"],
            rehearsal_required=data["rehearsal_required"],
        )


@login_required
@require_http_methods(["GET", "POST"])
def token_limits_view(request: AuthedHttpRequest, token_id: int) -> HttpResponse:
    token = owned_token(request.user, token_id)
    form = LimitsForm.showing(token_limits(token))
    if request.method == "POST":
        form = LimitsForm(request.POST)
        if form.is_valid():
            try:
                token_limits_set(token=token, limits=form.limits())
            except LimitsInvalid as exc:
                form.add_error(exc.field, str(exc))
            else:
                messages.success(request, f"Limits of token {token.prefix}… saved.")
                return redirect("limits:token-limits", token_id=token.pk)
    status = 400 if form.errors else 200
    return render(
        request, "actions/token_limits.html", {"token": token, "form": form}, status=status
    )
