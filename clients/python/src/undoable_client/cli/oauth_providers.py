"""The services `undoable connect NAME` signs in to: endpoints, scopes, the credential name.

A small table of its own rather than the web app's webapp/connections/providers.py, which
reads Django settings and holds the web app's confidential clients: a native app is a public
client (RFC 8252 8.5) registered apart, with a loopback redirect. Every field can be set from
the environment as UNDOABLE_CONNECT_<NAME>_<FIELD> (CLIENT_ID, CLIENT_SECRET, AUTHORIZE_URL,
TOKEN_URL, SCOPES, CREDENTIAL), which is also how a provider that is not built in is described.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from undoable_client.cli.config import UserError

NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


class ProviderError(UserError):
    """An unknown provider, or one described without what the flow needs."""


@dataclass(frozen=True)
class NativeProvider:
    name: str
    authorize_url: str = ""
    token_url: str = ""
    scopes: tuple[str, ...] = ()
    scope_separator: str = " "
    credential: str = ""  # where the token is kept: the environment variable runs read
    client_id: str = ""
    # Some services (Slack, GitHub) still ask a native app for its secret; it is no secret
    # there (RFC 8252 8.5), PKCE is what binds the code to this process.
    client_secret: str = field(default="", repr=False)


BUILT_IN = {
    "slack": NativeProvider(
        name="slack",
        authorize_url="https://slack.com/oauth/v2/authorize",
        token_url="https://slack.com/api/oauth.v2.access",  # noqa: S106 (a URL, not a secret)
        scopes=("channels:read", "channels:history", "chat:write"),
        scope_separator=",",
        credential="SLACK_TOKEN",
    ),
    "github": NativeProvider(
        name="github",
        authorize_url="https://github.com/login/oauth/authorize",
        token_url="https://github.com/login/oauth/access_token",  # noqa: S106 (a URL, not a secret)
        scopes=("read:user", "public_repo"),
        credential="GITHUB_TOKEN",
    ),
}


def _env(name: str, key: str) -> str | None:
    return os.environ.get(f"UNDOABLE_CONNECT_{name.upper().replace('-', '_')}_{key}")


def provider_for(name: str, *, client_id: str | None = None, scopes: list[str] | None = None,
                 credential: str | None = None) -> NativeProvider:  # fmt: skip
    """The provider NAME: the built-in description, then the environment, then the options."""
    if not NAME.fullmatch(name):
        raise ProviderError(f"{name!r} is not a provider name (lower-case letters, digits, -, _)")
    base = BUILT_IN.get(name, NativeProvider(name=name))
    env_scopes = _env(name, "SCOPES")
    chosen = replace(
        base,
        authorize_url=_env(name, "AUTHORIZE_URL") or base.authorize_url,
        token_url=_env(name, "TOKEN_URL") or base.token_url,
        scopes=tuple(scopes or (env_scopes.split() if env_scopes else base.scopes)),
        credential=credential
        or _env(name, "CREDENTIAL")
        or base.credential
        or f"{name.upper().replace('-', '_')}_TOKEN",
        client_id=client_id or _env(name, "CLIENT_ID") or base.client_id,
        client_secret=_env(name, "CLIENT_SECRET") or base.client_secret,
    )
    prefix = f"UNDOABLE_CONNECT_{name.upper().replace('-', '_')}_"
    needed = {"AUTHORIZE_URL": chosen.authorize_url, "TOKEN_URL": chosen.token_url,
              "CLIENT_ID": chosen.client_id}  # fmt: skip
    missing = [key for key, value in needed.items() if not value]
    if missing:
        known = "" if name in BUILT_IN else f" ({name} is not built in: slack, github are)"
        raise ProviderError(
            f"connect {name} needs {', '.join(prefix + key for key in missing)}{known}; "
            "the client id can also be given with --client-id"
        )
    return chosen
