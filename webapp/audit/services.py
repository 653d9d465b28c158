"""Appending to the ledger. The apps' services call one of these, one line each, after the
write they record (inside its transaction when there is one, so a rolled-back write leaves no
entry).

What goes in: who (user, token id and prefix), what (event, kind, SHA-256 of both programs,
hosts, intent), the outcome, digests and the time. Never a credential value: the values a call
carried are masked out of every text field, and nothing else holds them (programs refer to
credentials by name; only the programs' hashes are kept).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.utils import timezone

from webapp.audit.chain import GENESIS, entry_hash, entry_hmac
from webapp.audit.keys import audit_key
from webapp.audit.models import AuditEntry, AuditEvent, AuditHead
from webapp.credentials.masking import mask_text

INTENT_MAX_CHARS = 2000
OUTCOME_MAX_CHARS = 200
HEAD_ID = 1


def sha256_text(text: str | None) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() if text else ""


def audit_append(
    *,
    event: str,
    user: Any = None,
    token: Any = None,
    kind: str = "",
    target: str = "",
    forward_code: str | None = None,
    reverse_code: str | None = None,
    hosts: Iterable[str] = (),
    intent: str = "",
    outcome: str = "",
    digests: dict[str, Any] | None = None,
    secrets: Iterable[str] = (),
) -> AuditEntry:
    """Append one entry: numbered, linked and signed under the head's lock, so that every
    process appends into one gapless order. `secrets`: the credential values of the call,
    masked out of the entry's text."""
    key = audit_key()  # before the lock: a missing key refuses without waiting
    values = [value for value in secrets if value]

    def clean(text: str, limit: int) -> str:
        return mask_text(str(text), values)[:limit] if values else str(text)[:limit]

    entry = AuditEntry(
        user_id=getattr(user, "pk", None),
        username=getattr(user, "username", "") or "",
        token_id=getattr(token, "pk", None),
        token_prefix=getattr(token, "prefix", "") or "",
        event=event,
        kind=kind or "",
        target=target[:100],
        forward_sha256=sha256_text(forward_code),
        reverse_sha256=sha256_text(reverse_code),
        hosts=[clean(host, 255) for host in hosts],
        intent=clean(intent, INTENT_MAX_CHARS),
        outcome=clean(outcome, OUTCOME_MAX_CHARS),
        digests=digests or {},
    )
    with transaction.atomic():
        AuditHead.objects.get_or_create(pk=HEAD_ID, defaults={"last_hash": GENESIS})
        head = AuditHead.objects.select_for_update().get(pk=HEAD_ID)
        entry.seq = head.seq + 1
        entry.prev_hash = head.last_hash
        entry.created_at = timezone.now()
        entry.hmac = entry_hmac(entry, key)
        entry.save()
        AuditHead.objects.filter(pk=HEAD_ID).update(seq=entry.seq, last_hash=entry_hash(entry))
    return entry


def _action_token(query: Any) -> Any:
    """The token an agent's action was made with (None for the web app's own queries)."""
    try:
        return query.action.token
    except (ObjectDoesNotExist, AttributeError):
        return None


def audit_query(
    *,
    event: str,
    query: Any,
    target: str,
    outcome: str,
    token: Any = None,
    digests: dict[str, Any] | None = None,
    secrets: Iterable[str] = (),
) -> AuditEntry:
    """An entry about a query (or a share's snapshot of one): its owner, kind, programs, hosts
    and prompt; the token given, else the one its action was made with."""
    return audit_append(
        event=event,
        user=query.owner,
        token=token if token is not None else _action_token(query),
        kind=query.kind,
        target=target,
        forward_code=query.forward_code,
        reverse_code=query.reverse_code,
        hosts=query.hosts,
        intent=query.prompt,
        outcome=outcome,
        digests=digests,
        secrets=secrets,
    )


def audit_run(*, run: Any, outcome: str, secrets: Iterable[str] = ()) -> AuditEntry:
    """A run started, was refused before starting, or ended: `undo` for a reverse program's
    run."""
    event = AuditEvent.UNDO if run.direction == "reverse" else AuditEvent.RUN
    return audit_query(
        event=event,
        query=run.query,
        target=f"run {run.pk} ({run.direction})",
        outcome=outcome,
        digests={"code": sha256_text(run.code)},
        secrets=secrets,
    )


def audit_run_end(*, run: Any) -> AuditEntry:
    """A run ended (succeeded, failed, timed out, cancelled, reaped): recorded by the caller
    whose conditional update made the final move, so once per run. The credential values are
    not at hand here, so the entry leaves out the prompt and hosts (its `queued` entry has
    them, masked); its error is the row's, already masked by the worker."""
    query = run.query
    return audit_append(
        event=AuditEvent.UNDO if run.direction == "reverse" else AuditEvent.RUN,
        user=query.owner,
        token=_action_token(query),
        kind=query.kind,
        target=f"run {run.pk} ({run.direction})",
        forward_code=query.forward_code,
        reverse_code=query.reverse_code,
        outcome=f"{run.status}: {run.error}" if run.error else str(run.status),
        digests={
            "code": sha256_text(run.code),
            # a rest Undo's probe: did it find the effect gone (webapp.workspaces.probes)
            **({"probe_passed": run.probe["passed"]} if getattr(run, "probe", None) else {}),
        },
    )


def audit_fork(*, query: Any, share: Any) -> AuditEntry:
    """A share forked into a new query of the person who forked it (recorded as theirs)."""
    return audit_query(
        event=AuditEvent.SHARE_FORK,
        query=query,
        target=f"query {query.pk} (fork of share {share.pk})",
        outcome="created",
    )


def audit_action(*, query: Any, token: Any, secrets: Iterable[str] = ()) -> AuditEntry:
    return audit_query(
        event=AuditEvent.ACTION,
        query=query,
        token=token,
        target=f"action {query.pk}",
        outcome="created",
        secrets=secrets,
    )


# A change's final statuses and the event each records; the others (running, pending, the
# requested ones) are steps on the way, recorded when they settle.
_CHANGE_EVENTS = {"kept": AuditEvent.KEEP, "discarded": AuditEvent.DISCARD}


def audit_change(*, change: Any) -> AuditEntry | None:
    """A change settled: Keep, Discard, or Discard by the pending timeout (`timeout`)."""
    event = _CHANGE_EVENTS.get(str(change.status))
    if event is None:
        return None
    if change.timed_out:
        event = AuditEvent.TIMEOUT
    changes = json.dumps(change.changes or [], sort_keys=True)
    digests: dict[str, Any] = {"changes": sha256_text(changes)}
    check = change.undo_check or {}
    if check.get("before"):  # a verified undo: the state's digests before the run and after
        digests.update(
            state_before=check["before"], state_after=check["after"], matched=check["matched"]
        )
    return audit_query(
        event=event,
        query=change.run.query,
        target=f"change {change.pk} (run {change.run_id})",
        outcome=f"{change.status}: {change.message}",
        digests=digests,
    )


def audit_share(*, share: Any, event: str) -> AuditEntry:
    """A share link made or taken down (its secret link token is never recorded)."""
    outcome = "revoked" if event == AuditEvent.SHARE_REVOKE else "created"
    if event == AuditEvent.SHARE and share.include_output:
        outcome = "created with output"
    return audit_query(
        event=event,
        query=share,
        target=f"share {share.pk} (query {share.query_id})",
        outcome=outcome,
        digests={"output": sha256_text(share.output)} if share.output else {},
    )


def audit_token(*, token: Any, event: str) -> AuditEntry:
    """An API token created or revoked: its id and public prefix, never its secret or hash."""
    return audit_append(
        event=event,
        user=token.owner,
        token=token,
        target=f"token {token.pk} ({token.name})" if token.name else f"token {token.pk}",
        outcome="revoked" if event == AuditEvent.TOKEN_REVOKE else "created",
    )
