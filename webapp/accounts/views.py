"""Sign in (local password or Google), sign up, sign out, and the account page."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.accounts.authed import AuthedHttpRequest
from webapp.accounts.forms import SignupForm, ThrottledAuthenticationForm

logger = logging.getLogger(__name__)


class ThrottledLoginView(auth_views.LoginView):
    """Django's login view with ThrottledAuthenticationForm: a locked-out attempt is a 429."""

    form_class = ThrottledAuthenticationForm
    template_name = "accounts/login.html"
    redirect_authenticated_user = True

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if isinstance(form, ThrottledAuthenticationForm) and form.retry_after_s is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after_s)
        return response


login_view = ThrottledLoginView.as_view()
logout_view = auth_views.LogoutView.as_view()  # POST only (Django 5)


@require_http_methods(["GET", "POST"])
def signup_view(request: HttpRequest) -> HttpResponse:
    if not settings.UNDOABLE_ALLOW_SIGNUP:
        raise Http404("Sign-up is closed")
    if request.user.is_authenticated:
        return redirect(settings.LOGIN_REDIRECT_URL)
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        logger.info("local account created", extra={"user_id": user.pk})
        return redirect(settings.LOGIN_REDIRECT_URL)
    return render(request, "accounts/signup.html", {"form": form})


@login_required
def account_view(request: AuthedHttpRequest) -> HttpResponse:
    return account_page(request)


def account_page(request: AuthedHttpRequest, *, new_api_token: str = "") -> HttpResponse:
    """The account page; `new_api_token` is shown in this one response and stored nowhere."""
    google = request.user.social_auth.filter(provider="google-oauth2").first()
    # Versions before this one stashed a new token in the session until the page was viewed.
    request.session.pop("new_api_token", None)
    context = {"google_account": google, "new_api_token": new_api_token}
    response = render(request, "accounts/account.html", context)
    if new_api_token:
        response["Cache-Control"] = "no-store"  # nor in the browser's cache or history
    return response
