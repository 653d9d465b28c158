"""OAuth 2.0 for native apps (RFC 8252): the system browser, a loopback redirect, PKCE.

The authorization request goes to the browser; the provider redirects it to
http://127.0.0.1:PORT/callback, a listener this process opened on an ephemeral port of the
loopback address alone (RFC 8252 7.3), which takes one redirect and closes. The `state` is
checked before anything else is read, and the code is exchanged with the PKCE verifier
(RFC 7636, S256) that never left this process, so a code seen by anyone else is useless.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

from undoable_client.cli.config import UserError
from undoable_client.cli.oauth_providers import NativeProvider

# The listener's address, and the one named in the redirect URI (RFC 8252 8.3: the literal
# loopback address, not `localhost`, which a resolver or firewall may send elsewhere).
BIND_HOST = "127.0.0.1"
REDIRECT_HOST = "127.0.0.1"
CALLBACK_PATH = "/callback"
PAGE = (
    "<!doctype html><title>Undoable</title><p>{message}</p>"
    "<p>You can close this tab and go back to the terminal.</p>"
)


class OAuthError(UserError):
    """The sign-in did not give a token: refused, cut short, or not what was asked."""


def pkce_pair() -> tuple[str, str]:
    """A verifier (43 to 128 unreserved characters) and its S256 challenge."""
    verifier = secrets.token_urlsafe(64)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def state_matches(expected: str, received: str) -> bool:
    return secrets.compare_digest(expected.encode(), received.encode())


class LoopbackListener:
    """One redirect on the loopback address: a context manager that always closes."""

    def __init__(self) -> None:
        self.query: dict[str, str] | None = None
        self._server = HTTPServer((BIND_HOST, 0), _handler(self))

    @property
    def redirect_uri(self) -> str:
        return f"http://{REDIRECT_HOST}:{self._server.server_address[1]}{CALLBACK_PATH}"

    def wait(self, timeout_s: float) -> dict[str, str]:
        """The callback's query parameters; requests for other paths get a 404 meanwhile."""
        deadline = time.monotonic() + timeout_s
        while self.query is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OAuthError(f"no answer from the browser within {timeout_s:g} s (--timeout)")
            self._server.timeout = left
            self._server.handle_request()
        return self.query

    def close(self) -> None:
        self._server.server_close()

    def __enter__(self) -> LoopbackListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler(listener: LoopbackListener) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass  # the query holds the code: never on the terminal

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            if url.path != CALLBACK_PATH or listener.query is not None:
                self._page(404, "Not the sign-in's address.")
                return
            listener.query = {k: v[0] for k, v in parse_qs(url.query).items()}
            self._page(200, "Undoable received the answer.")

        def _page(self, status: int, message: str) -> None:
            body = PAGE.format(message=message).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    return Handler


def authorize_url(provider: NativeProvider, *, redirect_uri: str, state: str,
                  challenge: str) -> str:  # fmt: skip
    params = {
        "response_type": "code",
        "client_id": provider.client_id,
        "redirect_uri": redirect_uri,
        "scope": provider.scope_separator.join(provider.scopes),
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    separator = "&" if urlparse(provider.authorize_url).query else "?"
    return f"{provider.authorize_url}{separator}{urlencode(params)}"


def token_form(provider: NativeProvider, *, code: str, redirect_uri: str,
               verifier: str) -> dict[str, str]:  # fmt: skip
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "client_id": provider.client_id,
        "code_verifier": verifier,
    }
    if provider.client_secret:
        form["client_secret"] = provider.client_secret
    return form


def exchange(provider: NativeProvider, form: dict[str, str]) -> str:
    """The access token the token endpoint gives for the code; its error, else."""
    import httpx

    try:
        # Accept JSON: GitHub answers form-encoded without it.
        answer = httpx.post(provider.token_url, data=form, timeout=30,
                            headers={"Accept": "application/json"})  # fmt: skip
    except httpx.HTTPError as exc:
        raise OAuthError(f"cannot reach {provider.name}'s token endpoint: {exc}") from exc
    try:
        data: dict[str, Any] = answer.json()
    except ValueError:
        data = {}
    # Slack answers 200 with {"ok": false, "error": ...}; a user token sits in authed_user.
    token = data.get("access_token") or (data.get("authed_user") or {}).get("access_token")
    if answer.is_error or data.get("error") or data.get("ok") is False or not token:
        why = data.get("error_description") or data.get("error") or f"HTTP {answer.status_code}"
        raise OAuthError(f"{provider.name} refused the code: {why}")
    return str(token)


def sign_in(provider: NativeProvider, *, show_url: Callable[[str], None],
            timeout_s: float) -> str:  # fmt: skip
    """The whole flow: an access token for `provider`, or OAuthError."""
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(32)
    with LoopbackListener() as listener:
        redirect_uri = listener.redirect_uri
        show_url(authorize_url(provider, redirect_uri=redirect_uri, state=state,
                               challenge=challenge))  # fmt: skip
        query = listener.wait(timeout_s)
    if not state_matches(state, query.get("state", "")):
        raise OAuthError("the answer's state is not this sign-in's: refused (a forged redirect?)")
    if query.get("error"):
        why = query.get("error_description") or query["error"]
        raise OAuthError(f"{provider.name} refused the sign-in: {why}")
    if not query.get("code"):
        raise OAuthError("the redirect carried no code")
    form = token_form(provider, code=query["code"], redirect_uri=redirect_uri, verifier=verifier)
    return exchange(provider, form)
