"""The API-token section of the account page: create and revoke (HTML forms, CSRF-protected)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.accounts.authed import AuthedHttpRequest
from webapp.agents.tokens import token_create, token_revoke

ACCOUNT_URL = "accounts:account"


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)


def _back(request: HttpRequest) -> HttpResponse:
    return redirect(reverse(ACCOUNT_URL) + "#api-tokens")


@login_required
@require_POST
def token_create_view(request: AuthedHttpRequest) -> HttpResponse:
    form = TokenForm(request.POST)
    if form.is_valid():
        new = token_create(owner=request.user, name=form.cleaned_data["name"])
        # Shown once on the next page, then gone from the session too.
        request.session["new_api_token"] = new.secret
        messages.success(request, "API token created. Copy it now: it will not be shown again.")
    return _back(request)


@login_required
@require_POST
def token_revoke_view(request: AuthedHttpRequest, token_id: int) -> HttpResponse:
    token = token_revoke(owner=request.user, token_id=token_id)
    messages.success(request, f"Token {token.prefix}… revoked.")
    return _back(request)
