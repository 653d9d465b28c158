"""Create, revoke and fork shares. A share copies code and (optionally) output, never secrets."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from webapp.audit.models import AuditEvent
from webapp.audit.services import audit_fork, audit_share
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.runs.selectors import run_output_text
from webapp.shares.models import Share

logger = logging.getLogger(__name__)

# What a share carries from the query and a fork carries back: the code and everything that
# decides how it may run. `reversible` is among them, so a fork of an irreversible action still
# asks for the typed confirmation. Never credential values, never runs.
SNAPSHOT_FIELDS = (
    "prompt",
    "kind",
    "language",
    "forward_code",
    "reverse_code",
    "explanation",
    "hosts",
    "credential_names",
    "reversible",
)


def share_create(*, owner: User, query: Query, include_output: bool) -> Share:
    """Snapshot the query now; later edits of the query do not change the share."""
    share = Share(owner=owner, query=query, include_output=include_output, **_snapshot(query))
    last_run = query.runs.order_by("-created_at", "-id").first() if include_output else None
    if last_run is not None:
        share.output = _output_with_error(last_run)
        share.output_status = last_run.status
        share.output_run = last_run
    share.save()
    audit_share(share=share, event=AuditEvent.SHARE)
    logger.info(
        "share created",
        extra={"share_id": share.pk, "query_id": query.pk, "include_output": include_output},
    )
    return share


def share_revoke(*, share: Share) -> Share:
    """Take the link down for good; it answers 404 from now on."""
    share.revoked_at = timezone.now()
    share.save(update_fields=["revoked_at"])
    audit_share(share=share, event=AuditEvent.SHARE_REVOKE)
    logger.info("share revoked", extra={"share_id": share.pk})
    return share


@transaction.atomic
def share_fork(*, user: User, share: Share) -> Query:
    """A new query of `user` with the shared code; no runs, no output, no credential values."""
    fields = _snapshot(share)
    query = Query.objects.create(
        owner=user,
        generated_forward_code=fields["forward_code"],
        generated_reverse_code=fields["reverse_code"],
        **fields,
    )
    audit_fork(query=query, share=share)
    logger.info("share forked", extra={"share_id": share.pk, "query_id": query.pk})
    return query


def _snapshot(source: Query | Share) -> dict[str, Any]:
    fields = {name: getattr(source, name) for name in SNAPSHOT_FIELDS}
    # Fresh lists: the copy must not share mutable JSON values with its source.
    return {k: list(v) if isinstance(v, list) else v for k, v in fields.items()}


def _output_with_error(run: Run) -> str:
    # run.error is written by our code and never holds a secret (see Run.error).
    text = run_output_text(run)
    return f"{text}\n{run.error}".strip("\n") if run.error else text
