"""Checking the whole ledger: the chain from the first entry to the head."""

from __future__ import annotations

from webapp.audit.chain import GENESIS, Break, chain_check
from webapp.audit.keys import audit_key
from webapp.audit.models import AuditEntry, AuditHead

BATCH = 2000


def audit_verify() -> tuple[int, Break | None]:
    """(entries checked, the first break or None). Reads in seq order, a batch at a time."""
    head = AuditHead.objects.filter().order_by("pk").first()
    entries = AuditEntry.objects.order_by("seq").iterator(chunk_size=BATCH)
    count = AuditEntry.objects.count()
    found = chain_check(
        entries,
        key=audit_key(),
        head_seq=head.seq if head else 0,
        head_hash=head.last_hash if head else GENESIS,
    )
    return count, found
