"""What connections mean to a query: the prompt's list of granted scopes, the scopes a proposal
says it needs (validated against the providers' known scopes), and the check before a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webapp.connections.oauth import grant_verify
from webapp.connections.providers import Provider, providers_configured


def _by_credential() -> dict[str, Provider]:
    return {p.credential: p for p in providers_configured().values()}


def connections_clean(raw: Any) -> list[dict[str, Any]]:
    """The browser's list of connections [{credential, scopes}], reduced to configured providers
    and the scopes they offer (names and scopes only; a token never comes this way)."""
    if not isinstance(raw, list):
        return []
    known = _by_credential()
    out: list[dict[str, Any]] = []
    for item in raw[:20]:
        if not isinstance(item, dict):
            continue
        provider = known.get(str(item.get("credential")))
        scopes = item.get("scopes")
        if provider is None or not isinstance(scopes, list):
            continue
        granted = [str(s) for s in scopes if provider.scope_choice(str(s))]
        if granted:
            out.append({"credential": provider.credential, "scopes": granted})
    return out


def connections_prompt_lines(connections: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per connected service for the model: its variable and what each scope allows."""
    known = _by_credential()
    lines = []
    for item in connections:
        provider = known[item["credential"]]
        described = []
        for scope in item["scopes"]:
            choice = provider.scope_choice(scope)
            if choice is not None:
                kind = "can change things" if choice.write else "read only"
                described.append(f"{scope} ({choice.label}; {kind})")
        not_granted = [c.scope for c in provider.scopes if c.scope not in item["scopes"]]
        line = f"{provider.credential}: {provider.name}, granted " + ", ".join(described)
        if not_granted:
            line += "; NOT granted: " + ", ".join(not_granted)
        lines.append(line)
    return lines


def scopes_needed_clean(raw: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The proposal's {credential: [scope]} kept to configured providers' known scopes."""
    known = _by_credential()
    out: dict[str, list[str]] = {}
    for credential, scopes in raw.items():
        provider = known.get(credential)
        if provider is None:
            continue
        valid = [s for s in dict.fromkeys(scopes) if provider.scope_choice(s)]
        if valid:
            out[credential] = valid
    return out


def scopes_missing(
    *,
    needed: Mapping[str, Sequence[str]],
    credentials: Mapping[str, str],
    grants: Mapping[str, str],
) -> list[str]:
    """For each needed scope the run's token was not granted, a line naming it.

    The grant receipt is the server's own signature over an HMAC of the token, so a browser
    cannot claim a scope its token did not get.
    """
    problems = []
    known = _by_credential()
    for credential, scopes in needed.items():
        token = credentials.get(credential, "")
        receipt = grants.get(credential, "")
        grant = grant_verify(receipt=receipt, credential=credential, access_token=token)
        granted = set(grant.scopes) if grant else set()
        absent = [s for s in scopes if s not in granted]
        if absent:
            provider = known.get(credential)
            name = provider.name if provider else credential
            problems.append(f"{name} ({credential}) was not granted " + ", ".join(absent))
    return problems
