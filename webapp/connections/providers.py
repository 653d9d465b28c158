"""The services people can connect, from settings: endpoints, the credential name a token goes
under, and the scopes offered as plain read/write choices.

Only a provider whose client id is set is configured; the others are hidden. The built-in ones
(Slack, GitHub, Google, Dropbox) know their endpoints and scopes; `generic` takes them from
settings (OAUTH_GENERIC_*), for any OAuth 2.0 service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class ScopeChoice:
    scope: str
    label: str
    write: bool  # can change something at the service (send, post, delete)


@dataclass(frozen=True)
class Provider:
    id: str
    name: str
    credential: str  # the environment variable the token reaches a run as
    authorize_url: str
    token_url: str
    revoke_url: str = ""
    # How the revoke endpoint takes the token: "rfc7009" (form, client auth), "bearer"
    # (Authorization header), "github" (DELETE /applications/{client_id}/token, basic auth).
    revoke_style: str = "rfc7009"
    scopes: tuple[ScopeChoice, ...] = ()
    scope_separator: str = " "
    extra_authorize_params: dict[str, str] = field(default_factory=dict)
    client_id: str = ""
    client_secret: str = field(default="", repr=False)

    def scope_choice(self, scope: str) -> ScopeChoice | None:
        return next((c for c in self.scopes if c.scope == scope), None)

    def public(self) -> dict[str, object]:
        """What the browser may know: never the client secret."""
        return {
            "id": self.id,
            "name": self.name,
            "credential": self.credential,
            "revocable": bool(self.revoke_url),
            "scopes": [{"scope": c.scope, "label": c.label, "write": c.write} for c in self.scopes],
        }


def _read(scope: str, label: str) -> ScopeChoice:
    return ScopeChoice(scope=scope, label=label, write=False)


def _write(scope: str, label: str) -> ScopeChoice:
    return ScopeChoice(scope=scope, label=label, write=True)


_GOOGLE = "https://www.googleapis.com/auth/"

BUILT_IN: tuple[Provider, ...] = (
    Provider(
        id="slack",
        name="Slack",
        credential="SLACK_TOKEN",
        authorize_url="https://slack.com/oauth/v2/authorize",
        token_url="https://slack.com/api/oauth.v2.access",  # noqa: S106 (a URL, not a secret)
        revoke_url="https://slack.com/api/auth.revoke",
        revoke_style="bearer",
        scope_separator=",",
        scopes=(
            _read("channels:history", "Read messages in public channels"),
            _read("channels:read", "List public channels"),
            _write("chat:write", "Post and delete messages"),
        ),
    ),
    Provider(
        id="github",
        name="GitHub",
        credential="GITHUB_TOKEN",
        authorize_url="https://github.com/login/oauth/authorize",
        token_url="https://github.com/login/oauth/access_token",  # noqa: S106 (a URL, not a secret)
        revoke_url="https://api.github.com/applications/{client_id}/token",
        revoke_style="github",
        scopes=(
            _read("read:user", "Read your profile"),
            _write("public_repo", "Change public repositories"),
            _write("repo", "Change all repositories, private ones too"),
        ),
    ),
    Provider(
        id="google",
        name="Google (Gmail, Drive)",
        credential="GOOGLE_TOKEN",
        authorize_url="https://accounts.google.com/o/oauth2/v2/auth",
        token_url="https://oauth2.googleapis.com/token",  # noqa: S106 (a URL, not a secret)
        revoke_url="https://oauth2.googleapis.com/revoke",
        scopes=(
            _read(_GOOGLE + "gmail.readonly", "Gmail: read mail"),
            _write(_GOOGLE + "gmail.send", "Gmail: send mail"),
            _read(_GOOGLE + "drive.readonly", "Drive: read files"),
            _write(_GOOGLE + "drive.file", "Drive: change files it creates"),
        ),
        # A refresh token, and the consent screen again when scopes change.
        extra_authorize_params={"access_type": "offline", "prompt": "consent"},
    ),
    Provider(
        id="dropbox",
        name="Dropbox",
        credential="DROPBOX_TOKEN",
        authorize_url="https://www.dropbox.com/oauth2/authorize",
        token_url="https://api.dropboxapi.com/oauth2/token",  # noqa: S106 (a URL, not a secret)
        revoke_url="https://api.dropboxapi.com/2/auth/token/revoke",
        revoke_style="bearer",
        scopes=(
            _read("files.content.read", "Read files"),
            _write("files.content.write", "Change files"),
        ),
        extra_authorize_params={"token_access_type": "offline"},
    ),
)


def _generic(conf: Mapping[str, Any], client_id: str, client_secret: str) -> Provider:
    missing = [k for k in ("authorize_url", "token_url") if not conf.get(k)]
    reads = [str(s) for s in conf.get("read_scopes") or []]
    writes = [str(s) for s in conf.get("write_scopes") or []]
    if missing or not (reads or writes):
        needed = [f"OAUTH_GENERIC_{k.upper()}" for k in missing]
        if not (reads or writes):
            needed.append("OAUTH_GENERIC_READ_SCOPES or OAUTH_GENERIC_WRITE_SCOPES")
        raise ImproperlyConfigured(
            "OAUTH_GENERIC_CLIENT_ID is set, so the generic provider also needs "
            + ", ".join(needed)
        )
    return Provider(
        id="generic",
        name=str(conf.get("name") or "Other service"),
        credential=str(conf.get("credential") or "OAUTH_TOKEN"),
        authorize_url=str(conf["authorize_url"]),
        token_url=str(conf["token_url"]),
        revoke_url=str(conf.get("revoke_url") or ""),
        scopes=tuple(_read(s, s) for s in reads) + tuple(_write(s, s) for s in writes),
        client_id=client_id,
        client_secret=client_secret,
    )


def providers_configured() -> dict[str, Provider]:
    """Every provider with a client id in settings, by id, in the panel's order."""
    clients: dict[str, dict[str, str]] = settings.OAUTH_CLIENTS
    found: dict[str, Provider] = {}
    for provider in BUILT_IN:
        client = clients.get(provider.id) or {}
        if client.get("client_id"):
            found[provider.id] = Provider(
                **{
                    **provider.__dict__,
                    "client_id": client["client_id"],
                    "client_secret": client.get("client_secret", ""),
                }
            )
    generic = clients.get("generic") or {}
    if generic.get("client_id"):
        found["generic"] = _generic(
            settings.OAUTH_GENERIC, generic["client_id"], generic.get("client_secret", "")
        )
    return found


def provider_for_id(provider_id: str) -> Provider | None:
    return providers_configured().get(provider_id)
