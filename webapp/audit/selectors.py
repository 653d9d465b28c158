"""Reading the ledger: a person's own entries, or (staff) everyone's, with the page's filters."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from webapp.audit.models import AuditEntry, AuditEvent


@dataclass(frozen=True)
class AuditFilters:
    """The page's filters, validated: unknown values are dropped, not guessed at."""

    event: str = ""
    kind: str = ""
    since: dt.date | None = None
    until: dt.date | None = None
    user: str = ""  # staff page only: a username

    @classmethod
    def from_query(cls, params: dict[str, str], *, staff: bool = False) -> AuditFilters:
        event = params.get("event", "")
        return cls(
            event=event if event in AuditEvent.values else "",
            kind=params.get("kind", "")[:16],
            since=_date(params.get("since", "")),
            until=_date(params.get("until", "")),
            user=params.get("user", "")[:150] if staff else "",
        )


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text) if text else None
    except ValueError:
        return None


def audit_list_for_user(
    user: AbstractBaseUser | AnonymousUser, filters: AuditFilters
) -> QuerySet[AuditEntry]:
    """The entries about `user` (their runs, actions, tokens, shares), newest first."""
    return _filtered(AuditEntry.objects.filter(user_id=user.pk), filters)


def audit_list_all(filters: AuditFilters) -> QuerySet[AuditEntry]:
    """Every entry (the staff page), newest first."""
    entries = AuditEntry.objects.all()
    if filters.user:
        entries = entries.filter(username=filters.user)
    return _filtered(entries, filters)


def _filtered(entries: QuerySet[AuditEntry], filters: AuditFilters) -> QuerySet[AuditEntry]:
    if filters.event:
        entries = entries.filter(event=filters.event)
    if filters.kind:
        entries = entries.filter(kind=filters.kind)
    if filters.since:
        entries = entries.filter(created_at__date__gte=filters.since)
    if filters.until:
        entries = entries.filter(created_at__date__lte=filters.until)
    return entries.order_by("-seq")
