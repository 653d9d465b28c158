"""The ledger as JSON lines: one entry per line, every signed field and its HMAC, so an export
can be checked against the key outside the server."""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.db.models import QuerySet

from webapp.audit.chain import SIGNED_FIELDS
from webapp.audit.models import AuditEntry


def entry_json(entry: AuditEntry) -> dict[str, object]:
    values = {name: getattr(entry, name) for name in SIGNED_FIELDS}
    values["created_at"] = entry.created_at.isoformat()
    values["hmac"] = entry.hmac
    return values


def entries_jsonl(entries: QuerySet[AuditEntry]) -> Iterator[str]:
    for entry in entries.iterator(chunk_size=1000):
        yield json.dumps(entry_json(entry), sort_keys=True) + "\n"
