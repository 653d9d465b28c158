"""The server's part of a connection: sign the `state`, exchange a code, refresh, revoke, and
sign a grant receipt. Nothing here stores or logs a token; each token crosses this process once,
in a request from the browser or an answer to it.

The browser holds the PKCE verifier (it sends only its S256 challenge to start) and the tokens.
The server holds the client secret, so the code-for-token exchange happens here.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

# authlib's httpx client runs on httpx2 when it is installed (openai brings it): its errors and
# our own revoke calls use the same package.
import httpx2 as httpx
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import OAuth2Client
from django.conf import settings
from django.core import signing

from webapp.connections.providers import Provider

logger = logging.getLogger(__name__)

_STATE_SALT = "undoable.connections.state"
_GRANT_SALT = "undoable.connections.grant"
STATE_MAX_AGE_S = 600


class ConnectError(Exception):
    """A connection step failed; str() is a plain message for the person (never a token)."""


@dataclass(frozen=True)
class PendingSignIn:
    user_id: int
    provider_id: str
    scopes: list[str]
    redirect_uri: str


@dataclass(frozen=True)
class Grant:
    provider_id: str
    credential: str
    scopes: list[str]


def authorize_url_build(
    *, provider: Provider, user_id: int, scopes: list[str], code_challenge: str, redirect_uri: str
) -> str:
    """The provider's sign-in URL, with a `state` only this server can have signed."""
    unknown = [s for s in scopes if provider.scope_choice(s) is None]
    if unknown or not scopes:
        raise ConnectError(
            f"{provider.name} offers no scope {unknown[0]!r}." if unknown else "Choose a scope."
        )
    state = signing.dumps(
        {"u": user_id, "p": provider.id, "s": scopes, "r": redirect_uri, "n": secrets.token_hex(8)},
        salt=_STATE_SALT,
    )
    params = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": redirect_uri,
        "scope": provider.scope_separator.join(scopes),
        "state": state,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
        **provider.extra_authorize_params,
    }
    return (
        provider.authorize_url + ("&" if "?" in provider.authorize_url else "?") + urlencode(params)
    )


def state_verify(*, state: str, user_id: int, provider_id: str) -> PendingSignIn:
    """The sign-in this state was made for; it must be this person's, for this provider."""
    try:
        data = signing.loads(state, salt=_STATE_SALT, max_age=STATE_MAX_AGE_S)
    except signing.SignatureExpired:
        raise ConnectError("The sign-in took too long. Connect again.") from None
    except signing.BadSignature:
        raise ConnectError(
            "The sign-in answer does not belong to a sign-in this server started (state). "
            "Nothing was stored; connect again."
        ) from None
    if data.get("u") != user_id or data.get("p") != provider_id:
        raise ConnectError(
            "The sign-in answer belongs to another sign-in (state). Nothing was stored; "
            "connect again."
        )
    return PendingSignIn(
        user_id=user_id, provider_id=provider_id, scopes=list(data["s"]), redirect_uri=data["r"]
    )


def _client(provider: Provider, **kwargs: Any) -> OAuth2Client:
    return OAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret or None,
        token_endpoint_auth_method="client_secret_post" if provider.client_secret else "none",
        timeout=settings.OAUTH_TIMEOUT_S,
        **kwargs,
    )


def _call(provider: Provider, action: str, call: Any) -> dict[str, Any]:
    """Run one request to the provider; every failure becomes a plain ConnectError."""
    try:
        return dict(call())
    except OAuthError as exc:
        # RFC 6749 error codes and descriptions are the provider's words, not secrets.
        logger.info(
            "oauth provider refused",
            extra={"provider": provider.id, "action": action, "error": exc.error},
        )
        detail = f" ({exc.description})" if exc.description else ""
        raise ConnectError(f"{provider.name} refused the {action}: {exc.error}{detail}.") from None
    except httpx.HTTPStatusError as exc:
        raise ConnectError(
            f"{provider.name} answered the {action} with HTTP {exc.response.status_code}."
        ) from None
    except httpx.HTTPError:
        raise ConnectError(f"Could not reach {provider.name} for the {action}.") from None
    except ValueError:
        raise ConnectError(f"{provider.name} answered the {action} with no token.") from None


def _answer_scopes(answer: dict[str, Any]) -> list[str] | None:
    """The scopes the provider's answer names, or None when it names none (RFC 6749 5.1)."""
    raw = answer.get("scope")
    if not isinstance(raw, str):
        return None
    return [s for s in raw.replace(",", " ").split() if s]


def _token_answer(
    provider: Provider, answer: dict[str, Any], scopes: list[str], *, refresh_token: str = ""
) -> dict[str, Any]:
    """The browser's answer, with a receipt over `scopes` and the refresh token it will send."""
    access = answer.get("access_token")
    if not isinstance(access, str) or not access:
        raise ConnectError(f"{provider.name} answered with no access token.")
    refresh = answer.get("refresh_token")
    refresh = refresh if isinstance(refresh, str) and refresh else refresh_token
    out: dict[str, Any] = {
        "provider": provider.id,
        "credential": provider.credential,
        "access_token": access,
        "scopes": scopes,
        "grant": grant_sign(
            provider=provider, scopes=scopes, access_token=access, refresh_token=refresh
        ),
    }
    if refresh:
        out["refresh_token"] = refresh
    if isinstance(answer.get("expires_in"), int):
        out["expires_in"] = answer["expires_in"]
    return out


def token_exchange(
    *, provider: Provider, pending: PendingSignIn, code: str, code_verifier: str
) -> dict[str, Any]:
    """Trade the code (and the browser's PKCE verifier) for tokens; returns them, keeps nothing."""
    with _client(provider, redirect_uri=pending.redirect_uri) as client:
        answer = _call(
            provider,
            "sign-in",
            lambda: client.fetch_token(
                provider.token_url,
                grant_type="authorization_code",
                code=code,
                code_verifier=code_verifier,
                redirect_uri=pending.redirect_uri,
                headers={"Accept": "application/json"},
            ),
        )
    logger.info("connection made", extra={"provider": provider.id})
    named = _answer_scopes(answer)
    # No scope in the answer means what was asked for, and the state the server signed says that.
    return _token_answer(provider, answer, pending.scopes if named is None else named)


def token_refresh(*, provider: Provider, refresh_token: str, grant: str) -> dict[str, Any]:
    """A new access token for `refresh_token`, its receipt over no more than `grant` granted.

    `grant` is the receipt the sign-in (or the last refresh) answered with: it records the
    granted scopes and the refresh token they came with. A refresh never widens a grant (RFC
    6749 6): an answer without `scope` keeps the granted set, one with `scope` narrows it.
    """
    granted = grant_scopes_for_refresh(
        receipt=grant, provider=provider, refresh_token=refresh_token
    )
    with _client(provider) as client:
        answer = _call(
            provider,
            "refresh",
            lambda: client.refresh_token(
                provider.token_url,
                refresh_token=refresh_token,
                headers={"Accept": "application/json"},
            ),
        )
    scopes = scopes_after_refresh(granted=granted, named=_answer_scopes(answer))
    # Many providers keep the old refresh token valid and send no new one.
    return _token_answer(provider, answer, scopes, refresh_token=refresh_token)


def scopes_after_refresh(*, granted: list[str], named: list[str] | None) -> list[str]:
    """What a refreshed token's receipt may claim: the grant, narrowed by the answer's scope."""
    return list(granted) if named is None else [s for s in granted if s in named]


def token_revoke(*, provider: Provider, token: str) -> bool:
    """Ask the provider to revoke `token`; False when it has no revoke endpoint."""
    if not provider.revoke_url:
        return False
    if provider.revoke_style == "rfc7009":
        with _client(provider) as client:
            revoke = client.revoke_token
            response = _call_revoke(provider, lambda: revoke(provider.revoke_url, token))
    else:
        url = provider.revoke_url.format(client_id=provider.client_id)
        with httpx.Client(timeout=settings.OAUTH_TIMEOUT_S) as http:
            if provider.revoke_style == "bearer":
                request = lambda: http.post(url, headers={"Authorization": f"Bearer {token}"})  # noqa: E731
            else:
                request = lambda: http.request(  # noqa: E731
                    "DELETE",
                    url,
                    json={"access_token": token},
                    auth=(provider.client_id, provider.client_secret),
                    headers={"Accept": "application/vnd.github+json"},
                )
            response = _call_revoke(provider, request)
    if response.status_code >= 400:
        raise ConnectError(f"{provider.name} answered the revoke with HTTP {response.status_code}.")
    logger.info("connection revoked", extra={"provider": provider.id})
    return True


def _call_revoke(provider: Provider, call: Any) -> httpx.Response:
    try:
        return call()  # type: ignore[no-any-return]
    except httpx.HTTPError:
        raise ConnectError(f"Could not reach {provider.name} for the revoke.") from None


def _token_digest(access_token: str) -> str:
    key = hmac.new(settings.SECRET_KEY.encode(), b"undoable.connections.token", "sha256").digest()
    return hmac.new(key, access_token.encode(), hashlib.sha256).hexdigest()


def grant_sign(
    *, provider: Provider, scopes: list[str], access_token: str, refresh_token: str = ""
) -> str:
    """A receipt the browser keeps beside the token: these scopes were granted for this token.

    It holds HMACs of the access and refresh tokens, never the tokens, so a run can prove which
    scopes its credential carries, and a refresh which scopes its refresh token was granted,
    without the server keeping anything.
    """
    data: dict[str, Any] = {"p": provider.id, "c": provider.credential, "s": scopes}
    data["h"] = _token_digest(access_token)
    if refresh_token:
        data["r"] = _token_digest(refresh_token)
    return signing.dumps(data, salt=_GRANT_SALT)


def grant_scopes_for_refresh(*, receipt: str, provider: Provider, refresh_token: str) -> list[str]:
    """The scopes `receipt` records for `refresh_token` at `provider`; ConnectError if none."""
    try:
        data = signing.loads(receipt, salt=_GRANT_SALT)
    except signing.BadSignature:
        data = {}
    if (
        data.get("p") != provider.id
        or data.get("c") != provider.credential
        or not hmac.compare_digest(str(data.get("r")), _token_digest(refresh_token))
    ):
        raise ConnectError(
            f"This {provider.name} connection's grant receipt does not match its refresh token. "
            "Nothing was refreshed; connect again."
        )
    return [str(s) for s in data.get("s") or []]


def grant_verify(*, receipt: str, credential: str, access_token: str) -> Grant | None:
    """The scopes a receipt grants `access_token` under `credential`, or None if it does not."""
    try:
        data = signing.loads(receipt, salt=_GRANT_SALT)
    except signing.BadSignature:
        return None
    if data.get("c") != credential or not hmac.compare_digest(
        str(data.get("h")), _token_digest(access_token)
    ):
        return None
    return Grant(provider_id=str(data["p"]), credential=credential, scopes=list(data["s"]))
