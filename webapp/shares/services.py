"""Create, revoke and fork shares. A share copies code and (optionally) output, never secrets."""

from __future__ import annotations

import logging

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from webapp.queries.models import Query, Run
from webapp.queries.selectors import run_output_text
from webapp.shares.models import Share

logger = logging.getLogger(__name__)


def share_create(*, owner: User, query: Query, include_output: bool) -> Share:
    """Snapshot the query now; later edits of the query do not change the share."""
    share = Share(
        owner=owner,
        query=query,
        prompt=query.prompt,
        kind=query.kind,
        language=query.language,
        forward_code=query.forward_code,
        reverse_code=query.reverse_code,
        explanation=query.explanation,
        hosts=list(query.hosts),
        credential_names=list(query.credential_names),
        include_output=include_output,
    )
    last_run = query.runs.order_by("-created_at", "-id").first() if include_output else None
    if last_run is not None:
        share.output = _output_with_error(last_run)
        share.output_status = last_run.status
    share.save()
    logger.info(
        "share created",
        extra={"share_id": share.pk, "query_id": query.pk, "include_output": include_output},
    )
    return share


def share_revoke(*, share: Share) -> Share:
    """Take the link down for good; it answers 404 from now on."""
    share.revoked_at = timezone.now()
    share.save(update_fields=["revoked_at"])
    logger.info("share revoked", extra={"share_id": share.pk})
    return share


@transaction.atomic
def share_fork(*, user: User, share: Share) -> Query:
    """A new query of `user` with the shared code; no runs, no output, no credential values."""
    query = Query.objects.create(
        owner=user,
        prompt=share.prompt,
        kind=share.kind,
        language=share.language,
        forward_code=share.forward_code,
        reverse_code=share.reverse_code,
        generated_forward_code=share.forward_code,
        generated_reverse_code=share.reverse_code,
        explanation=share.explanation,
        hosts=list(share.hosts),
        credential_names=list(share.credential_names),
    )
    logger.info("share forked", extra={"share_id": share.pk, "query_id": query.pk})
    return query


def _output_with_error(run: Run) -> str:
    # run.error is written by our code and never holds a secret (see Run.error).
    text = run_output_text(run)
    return f"{text}\n{run.error}".strip("\n") if run.error else text
