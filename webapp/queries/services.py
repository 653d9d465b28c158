"""Writes for queries: the LLM's proposals, the code a person edits, the versions a proposal
replaced. Views call these; nothing else writes. Running the code is webapp.runs.services.
"""

from __future__ import annotations

import logging

from django.contrib.auth.models import User
from django.db import transaction

from webapp import llm
from webapp.connections.scopes import (
    connections_clean,
    connections_prompt_lines,
    scopes_needed_clean,
)
from webapp.queries.models import Query, QueryVersion

logger = logging.getLogger(__name__)

# How many replaced versions of a query "Undo replace" can step back through.
VERSIONS_KEPT = 20
# What a new proposal replaces, and so what a version keeps and "Undo replace" puts back.
_VERSIONED_FIELDS = (
    "forward_code",
    "reverse_code",
    "generated_forward_code",
    "generated_reverse_code",
    "forward_code_before_fix",
    "reverse_code_before_fix",
    "explanation",
    "hosts",
    "credential_names",
    "needed_scopes",
    "reversible",
    "probe_code",
)


def query_create(
    *,
    owner: User,
    prompt: str,
    kind: str = "python",
    credential_names: list[str] | None = None,
    connections: object = None,
) -> Query:
    """Ask the LLM for code and save the query with it.

    `connections` is the browser's list of connected services [{credential, scopes}]; the
    model is told what each granted (never a token). Raises LLMError (nothing saved) when
    generation fails: the page keeps the prompt and offers to try again or to write the code by
    hand.
    """
    proposal = llm.propose_action(
        prompt=prompt,
        kind=kind,
        credential_names=credential_names,
        connection_lines=connections_prompt_lines(connections_clean(connections)),
    )
    query = Query(owner=owner, prompt=prompt.strip(), kind=kind)
    _apply_proposal(query, proposal)
    query.save()
    logger.info("query created", extra={"query_id": query.pk, "kind": kind})
    return query


def query_create_blank(*, owner: User, prompt: str = "", kind: str = "python") -> Query:
    """A query whose code the person writes by hand (no LLM involved)."""
    return Query.objects.create(owner=owner, prompt=prompt.strip() or "Written by hand", kind=kind)


def query_generate(
    *, query: Query, credential_names: list[str] | None = None, connections: object = None
) -> Query:
    """Ask the LLM again for this query's prompt; replaces both codes.

    The replaced code (edits included) is kept as a QueryVersion first, so `query_undo_replace`
    can put it back. On failure raises LLMError and records it in `generation_error`; the code
    is left alone and no version is added.
    """
    try:
        proposal = llm.propose_action(
            prompt=query.prompt,
            kind=query.kind,
            credential_names=credential_names,
            connection_lines=connections_prompt_lines(connections_clean(connections)),
        )
    except llm.LLMError as exc:
        query.generation_error = str(exc)
        query.save(update_fields=["generation_error", "updated_at"])
        raise
    with transaction.atomic():
        _version_keep(query)
        _apply_proposal(query, proposal)
        query.save()
    logger.info("query code replaced by a new proposal", extra={"query_id": query.pk})
    return query


def _version_keep(query: Query) -> None:
    """Keep the query's current code as a version (nothing to keep for two empty editors)."""
    if not (query.forward_code.strip() or query.reverse_code.strip()):
        return
    QueryVersion.objects.create(
        query=query, **{name: getattr(query, name) for name in _VERSIONED_FIELDS}
    )
    stale = query.versions.order_by("-created_at", "-id").values_list("pk", flat=True)
    QueryVersion.objects.filter(pk__in=list(stale[VERSIONS_KEPT:])).delete()


def query_undo_replace(*, query: Query) -> QueryVersion | None:
    """Put back the code the last proposal replaced; that version leaves the list.

    Returns the restored version, or None (nothing changes) when there is none left.
    """
    with transaction.atomic():
        version = (
            QueryVersion.objects.select_for_update()
            .filter(query=query)
            .order_by("-created_at", "-id")
            .first()
        )
        if version is None:
            return None
        for name in _VERSIONED_FIELDS:
            setattr(query, name, getattr(version, name))
        query.save(update_fields=[*_VERSIONED_FIELDS, "updated_at"])
        version.delete()
    logger.info("replaced query code restored", extra={"query_id": query.pk})
    return version


def _apply_proposal(query: Query, proposal: llm.Proposal) -> None:
    query.forward_code = query.generated_forward_code = proposal.forward_code
    query.reverse_code = query.generated_reverse_code = proposal.reverse_code
    query.explanation = proposal.explanation
    query.credential_names = proposal.credentials
    query.needed_scopes = {
        name: scopes
        for name, scopes in scopes_needed_clean(proposal.scopes).items()
        if name in proposal.credentials
    }
    query.hosts = proposal.hosts
    query.reversible = proposal.reversible
    query.probe_code = proposal.probe_code
    query.generation_error = ""
    # A new proposal replaces the code a fix was made to: that diff no longer means anything.
    query.forward_code_before_fix = query.reverse_code_before_fix = ""


def query_update(
    *,
    query: Query,
    forward_code: str | None = None,
    reverse_code: str | None = None,
    credential_names: list[str] | None = None,
    hosts: list[str] | None = None,
) -> Query:
    """Save edits (the editors autosave through this). Only given fields change."""
    fields = ["updated_at"]
    for name, value in (
        ("forward_code", forward_code),
        ("reverse_code", reverse_code),
        ("credential_names", credential_names),
        ("hosts", hosts),
    ):
        if value is not None:
            setattr(query, name, value)
            fields.append(name)
    query.save(update_fields=fields)
    return query
