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
from webapp.accounts.views import account_page
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
    if not form.is_valid():
        return _back(request)
    new = token_create(owner=request.user, name=form.cleaned_data["name"])
    # Shown once, in the answer to this POST: never stored in the session, a cookie or a message.
    messages.success(request, "API token created. Copy it now: it will not be shown again.")
    return account_page(request, new_api_token=new.secret)


@login_required
@require_POST
def token_revoke_view(request: AuthedHttpRequest, token_id: int) -> HttpResponse:
    token = token_revoke(owner=request.user, token_id=token_id)
    messages.success(request, f"Token {token.prefix}… revoked.")
    return _back(request)
