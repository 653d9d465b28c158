"""The Connections panel's JSON calls and the sign-in popup's landing page.

Every answer carrying a token is `Cache-Control: no-store`; no request or answer body is logged.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from pydantic import BaseModel, Field, ValidationError

from webapp.accounts.authed import AuthedHttpRequest
from webapp.connections import oauth
from webapp.connections.providers import Provider, provider_for_id
from webapp.json_body import BadJsonBody, json_body_read

_PKCE = r"^[A-Za-z0-9._~-]{43,128}$"


class BeginBody(BaseModel):
    scopes: list[str] = Field(min_length=1, max_length=20)
    code_challenge: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$")


class TokenBody(BaseModel):
    code: str = Field(min_length=1, max_length=2000)
    state: str = Field(min_length=1, max_length=2000)
    code_verifier: str = Field(pattern=_PKCE)


class RefreshBody(BaseModel):
    refresh_token: str = Field(min_length=1, max_length=4000)
    # The receipt the last sign-in or refresh answered with: the granted scopes come from it,
    # never from a list the browser sends.
    grant: str = Field(min_length=1, max_length=8000)


class RevokeBody(BaseModel):
    token: str = Field(min_length=1, max_length=4000)


def _provider(provider_id: str) -> Provider:
    provider = provider_for_id(provider_id)
    if provider is None:
        raise Http404("No such service is configured.")
    return provider


def _body(request: HttpRequest, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate(json_body_read(request))
    except BadJsonBody as exc:
        raise _BadRequest(f"Invalid request: {exc}", status=exc.status) from None
    except ValidationError as exc:
        error = exc.errors(include_input=False, include_url=False)[0]
        field = ".".join(str(p) for p in error["loc"])
        raise _BadRequest(f"Invalid request: {field}: {error['msg']}") from None


class _BadRequest(Exception):
    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _answer(call: Any) -> JsonResponse:
    try:
        return JsonResponse(call())
    except _BadRequest as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    except oauth.ConnectError as exc:
        return JsonResponse({"error": str(exc)}, status=400)


def _redirect_uri(request: HttpRequest) -> str:
    return request.build_absolute_uri(reverse("connections:callback"))


@login_required
@require_POST
@never_cache
def connection_begin(request: AuthedHttpRequest, provider_id: str) -> JsonResponse:
    provider = _provider(provider_id)

    def begin() -> dict[str, Any]:
        body = _body(request, BeginBody)
        url = oauth.authorize_url_build(
            provider=provider,
            user_id=request.user.id,
            scopes=body.scopes,
            code_challenge=body.code_challenge,
            redirect_uri=_redirect_uri(request),
        )
        return {"authorize_url": url}

    return _answer(begin)


@login_required
@require_POST
@never_cache
def connection_token(request: AuthedHttpRequest, provider_id: str) -> JsonResponse:
    provider = _provider(provider_id)

    def exchange() -> dict[str, Any]:
        body = _body(request, TokenBody)
        pending = oauth.state_verify(
            state=body.state, user_id=request.user.id, provider_id=provider.id
        )
        return oauth.token_exchange(
            provider=provider, pending=pending, code=body.code, code_verifier=body.code_verifier
        )

    return _answer(exchange)


@login_required
@require_POST
@never_cache
def connection_refresh(request: AuthedHttpRequest, provider_id: str) -> JsonResponse:
    provider = _provider(provider_id)

    def refresh() -> dict[str, Any]:
        body = _body(request, RefreshBody)
        return oauth.token_refresh(
            provider=provider, refresh_token=body.refresh_token, grant=body.grant
        )

    return _answer(refresh)


@login_required
@require_POST
@never_cache
def connection_revoke(request: AuthedHttpRequest, provider_id: str) -> JsonResponse:
    provider = _provider(provider_id)

    def revoke() -> dict[str, Any]:
        body = _body(request, RevokeBody)
        return {"revoked": oauth.token_revoke(provider=provider, token=body.token)}

    return _answer(revoke)


@require_GET
@never_cache
def connection_callback(request: HttpRequest) -> HttpResponse:
    """Where the provider sends the popup back; its script hands the answer to the opener page.

    The code is worth nothing without the opener's PKCE verifier and this person's session.
    """
    response = render(request, "connections/callback.html")
    # The code is in this page's URL: no Referer to anything it loads.
    response["Referrer-Policy"] = "no-referrer"
    return response
