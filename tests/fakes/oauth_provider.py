"""A real local OAuth 2.0 provider, and the API it guards, for the connection tests.

    with FakeOAuthProvider(client_id="c", client_secret="s",
                           redirect_uris=["http://127.0.0.1:8000/connections/callback/"],
                           scopes=["items.read", "items.write"]) as provider:
        ... provider.authorize_url, provider.token_url, provider.revoke_url, provider.api_url

Authorization code grant with PKCE (S256 only) as RFC 6749 and RFC 7636 ask:
  GET  /authorize  approves at once (a browser test has no one to click), redirecting to the
                   registered redirect URI with the code and the state; an unregistered redirect
                   URI or an unknown client gets an error page and no redirect; an unknown scope,
                   or `next_error` set, redirects with ?error=. A registered loopback URI
                   (http://127.0.0.1/callback) matches on any port, as RFC 8252 7.3 asks for
                   native apps; `pkce_required = False` lets a client without PKCE through.
  POST /token      authorization_code (client secret, redirect URI and verifier checked; a code
                   works once, and replaying it revokes what it gave) or refresh_token; the
                   answer's `scope` can be left out (`scope_in_answers`) or, for a refresh,
                   replaced (`refresh_answer_scope`).
  POST /revoke     RFC 7009: the token (access or refresh) stops working.
The guarded API (Bearer token):
  GET  /api/items  needs items.read or items.write;  POST /api/items {name} needs items.write,
  else 403 {"error": "insufficient_scope"}.
Thread-safe; `issue_access_token` fixes the next access token's value (the canary test);
`token_gate`, when set, holds every POST /token until it is set (a test looks at the client
meanwhile). A client with an empty `client_secret` is a public one (native apps).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse


@dataclass
class _Code:
    scopes: list[str]
    redirect_uri: str
    challenge: str
    used: bool = False
    issued: list[str] = field(default_factory=list)


class FakeOAuthProvider:
    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        redirect_uris: list[str],
        scopes: list[str],
        host: str = "127.0.0.1",
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.redirect_uris = list(redirect_uris)
        self.scopes = list(scopes)
        self.next_error = ""  # set to e.g. "access_denied": the next /authorize answers with it
        # False: token answers leave `scope` out, as RFC 6749 5.1 allows when it is the one asked.
        self.scope_in_answers = True
        # Set: a refresh answer names this scope, whatever the refresh token was granted.
        self.refresh_answer_scope: str | None = None
        self.pkce_required = True
        self.token_gate: threading.Event | None = None
        self.token_asked = threading.Event()  # set by the first POST /token
        self._lock = threading.Lock()
        self._codes: dict[str, _Code] = {}
        self._tokens: dict[str, list[str]] = {}  # access token -> scopes
        self._refresh: dict[str, list[str]] = {}  # refresh token -> scopes
        self._next_access: list[str] = []
        self.items: list[str] = []
        self.revoked: list[str] = []
        self.token_requests = 0
        self._server = ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def host_port(self) -> str:
        return self.base_url.removeprefix("http://")

    authorize_url = property(lambda self: self.base_url + "/authorize")
    token_url = property(lambda self: self.base_url + "/token")
    revoke_url = property(lambda self: self.base_url + "/revoke")
    api_url = property(lambda self: self.base_url + "/api/items")

    def issue_access_token(self, value: str) -> None:
        with self._lock:
            self._next_access.append(value)

    def issued_tokens(self) -> list[str]:
        """Every access and refresh token ever issued (for leak sweeps)."""
        with self._lock:
            return [token for code in self._codes.values() for token in code.issued]

    def live_tokens(self) -> dict[str, list[str]]:
        with self._lock:
            return dict(self._tokens)

    def __enter__(self) -> FakeOAuthProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # --- grant logic (called from the handler) -----------------------------------------------
    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], str]:
        """(status, headers, body) for GET /authorize."""
        redirect = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id or not self._registered(redirect):
            # RFC 6749 4.1.2.1: never redirect to an unverified URI.
            return 400, {}, "Error: unknown client or redirect_uri not registered"
        state = query.get("state", "")
        scopes = query.get("scope", "").split()
        error = ""
        if self.next_error:
            error, self.next_error = self.next_error, ""
        elif not scopes or any(s not in self.scopes for s in scopes):
            error = "invalid_scope"
        elif self.pkce_required and (
            query.get("code_challenge_method") != "S256" or not query.get("code_challenge")
        ):
            error = "invalid_request"
        if error:
            params = {"error": error, "error_description": f"the provider said {error}"}
            return 302, {"Location": f"{redirect}?{urlencode({**params, 'state': state})}"}, ""
        code = secrets.token_urlsafe(16)
        with self._lock:
            self._codes[code] = _Code(scopes, redirect, query.get("code_challenge", ""))
        return 302, {"Location": f"{redirect}?{urlencode({'code': code, 'state': state})}"}, ""

    def _registered(self, redirect: str) -> bool:
        if redirect in self.redirect_uris:
            return True
        url = urlparse(redirect)
        if url.scheme != "http" or url.hostname != "127.0.0.1" or url.port is None:
            return False
        return url._replace(netloc="127.0.0.1").geturl() in self.redirect_uris

    def token(self, form: dict[str, str], basic: tuple[str, str] | None) -> tuple[int, Any]:
        self.token_asked.set()
        if self.token_gate is not None:
            self.token_gate.wait(timeout=60)
        client_id, secret = basic or (form.get("client_id", ""), form.get("client_secret", ""))
        if client_id != self.client_id or secret != self.client_secret:
            return 401, {"error": "invalid_client"}
        with self._lock:
            self.token_requests += 1
            if form.get("grant_type") == "refresh_token":
                scopes = self._refresh.get(form.get("refresh_token", ""))
                if scopes is None:
                    return 400, {"error": "invalid_grant", "error_description": "unknown token"}
                answer = self._issue(scopes, refresh=None)
                if self.refresh_answer_scope is not None:
                    answer["scope"] = self.refresh_answer_scope
                return 200, answer
            code = self._codes.get(form.get("code", ""))
            if code is None:
                return 400, {"error": "invalid_grant", "error_description": "unknown code"}
            if code.used:
                for token in code.issued:  # RFC 6749 10.5: a replayed code revokes its tokens
                    self._tokens.pop(token, None)
                    self._refresh.pop(token, None)
                return 400, {"error": "invalid_grant", "error_description": "code already used"}
            code.used = True
            if form.get("redirect_uri") != code.redirect_uri:
                return 400, {"error": "invalid_grant", "error_description": "redirect_uri mismatch"}
            verifier = form.get("code_verifier", "").encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if code.challenge and digest.decode() != code.challenge:
                why = "PKCE verifier mismatch"
                return 400, {"error": "invalid_grant", "error_description": why}
            answer = self._issue(code.scopes, refresh=secrets.token_urlsafe(24))
            code.issued += [answer["access_token"], answer["refresh_token"]]
            return 200, answer

    def _issue(self, scopes: list[str], *, refresh: str | None) -> dict[str, Any]:
        access = self._next_access.pop(0) if self._next_access else secrets.token_urlsafe(24)
        self._tokens[access] = list(scopes)
        answer: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": 3600,
        }
        if self.scope_in_answers:
            answer["scope"] = " ".join(scopes)
        if refresh:
            self._refresh[refresh] = list(scopes)
            answer["refresh_token"] = refresh
        return answer

    def revoke(self, form: dict[str, str]) -> int:
        token = form.get("token", "")
        with self._lock:
            self._tokens.pop(token, None)
            self._refresh.pop(token, None)
            self.revoked.append(token)
        return 200

    def api(self, method: str, auth: str, body: dict[str, Any]) -> tuple[int, Any]:
        token = auth.removeprefix("Bearer ").strip()
        with self._lock:
            scopes = self._tokens.get(token)
            if scopes is None:
                return 401, {"error": "invalid_token"}
            if method == "GET":
                if not {"items.read", "items.write"} & set(scopes):
                    return 403, {"error": "insufficient_scope", "needed": "items.read"}
                return 200, {"items": list(self.items)}
            if "items.write" not in scopes:
                return 403, {"error": "insufficient_scope", "needed": "items.write"}
            self.items.append(str(body.get("name", "")))
            return 201, {"items": list(self.items)}


def _handler(provider: FakeOAuthProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = body if isinstance(body, str) else json.dumps(body)
            raw = data.encode()
            self.send_response(status)
            kind = "text/plain" if isinstance(body, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(raw)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)

        def _form(self) -> tuple[dict[str, str], bytes]:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parsed = parse_qs(raw.decode(errors="replace"))
            return {k: v[0] for k, v in parsed.items()}, raw

        def _basic(self) -> tuple[str, str] | None:
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Basic "):
                return None
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            return user, password

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            if url.path == "/authorize":
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                status, headers, body = provider.authorize(query)
                self._send(status, body, headers)
            elif url.path == "/api/items":
                self._send(*provider.api("GET", self.headers.get("Authorization", ""), {}))
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            if path == "/token":
                form, _ = self._form()
                self._send(*provider.token(form, self._basic()))
            elif path == "/revoke":
                form, _ = self._form()
                self._send(provider.revoke(form), {})
            elif path == "/api/items":
                _, raw = self._form()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                self._send(*provider.api("POST", self.headers.get("Authorization", ""), body))
            else:
                self._send(404, {"error": "not_found"})

    return Handler
