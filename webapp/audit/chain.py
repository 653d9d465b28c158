"""How an entry is signed and linked, and how the chain is checked. Pure functions over rows."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from webapp.audit.models import AuditEntry

GENESIS = "0" * 64
# Every column but the HMAC: what the HMAC signs and the next entry's prev_hash covers.
SIGNED_FIELDS = (
    "seq",
    "created_at",
    "user_id",
    "username",
    "token_id",
    "token_prefix",
    "event",
    "kind",
    "target",
    "forward_sha256",
    "reverse_sha256",
    "hosts",
    "intent",
    "outcome",
    "digests",
    "prev_hash",
)


def entry_content(entry: AuditEntry) -> bytes:
    """The entry as canonical JSON (sorted keys, no spaces, the time in UTC microseconds)."""
    values: dict[str, Any] = {name: getattr(entry, name) for name in SIGNED_FIELDS}
    values["created_at"] = entry.created_at.astimezone(dt.UTC).isoformat()
    return json.dumps(values, sort_keys=True, separators=(",", ":")).encode()


def entry_hmac(entry: AuditEntry, key: bytes) -> str:
    return hmac.new(key, entry_content(entry), hashlib.sha256).hexdigest()


def entry_hash(entry: AuditEntry) -> str:
    """What the next entry's prev_hash holds: this one's content and its HMAC together."""
    return hashlib.sha256(entry_content(entry) + entry.hmac.encode()).hexdigest()


def hmac_ok(entry: AuditEntry, key: bytes) -> bool:
    return hmac.compare_digest(entry.hmac, entry_hmac(entry, key))


@dataclass(frozen=True)
class Break:
    """The first entry the chain does not hold up at (seq, and why)."""

    seq: int
    reason: str

    def __str__(self) -> str:
        return f"entry {self.seq}: {self.reason}"


def chain_check(
    entries: Iterable[AuditEntry], *, key: bytes, head_seq: int, head_hash: str
) -> Break | None:
    """Walk the entries in seq order: each must follow the one before without a gap, link to
    its hash and carry a valid HMAC; the last must be the head's. None when all hold."""
    expected_seq, expected_prev = 1, GENESIS
    for entry in entries:
        if entry.seq != expected_seq:
            return Break(expected_seq, f"missing (the next entry is {entry.seq})")
        if entry.prev_hash != expected_prev:
            return Break(entry.seq, "prev_hash does not match the entry before")
        if not hmac_ok(entry, key):
            return Break(entry.seq, "HMAC does not match its content (edited)")
        expected_seq, expected_prev = entry.seq + 1, entry_hash(entry)
    if head_seq != expected_seq - 1:
        return Break(expected_seq, f"missing (the head says the last entry is {head_seq})")
    if head_hash != expected_prev:
        return Break(head_seq, "the head's hash does not match the last entry")
    return None
