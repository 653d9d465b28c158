"""Ledger rows. No foreign keys: an entry outlives the account, token or query it names, and a
cascade must never delete (and so break) the chain."""

from __future__ import annotations

from django.db import models


class AuditEvent(models.TextChoices):
    RUN = "run", "Run"
    ACTION = "action", "Action"
    KEEP = "keep", "Keep"
    DISCARD = "discard", "Discard"
    UNDO = "undo", "Undo"
    TIMEOUT = "timeout", "Timeout"
    SHARE = "share", "Share"
    SHARE_REVOKE = "share_revoke", "Share revoked"
    SHARE_FORK = "share_fork", "Share forked"
    TOKEN_CREATE = "token_create", "Token created"
    TOKEN_REVOKE = "token_revoke", "Token revoked"
    EXEC_SUMMARY = "exec_summary", "Exec calls (per minute)"
    CELL_SUMMARY = "cell_summary", "Session cells (per minute)"


class AuditEntry(models.Model):
    """One link of the chain: `prev_hash` is the SHA-256 of the entry before (its signed
    content and its HMAC), `hmac` signs this entry's content under UNDOABLE_AUDIT_KEY."""

    seq = models.PositiveBigIntegerField(unique=True)
    created_at = models.DateTimeField()
    user_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    username = models.CharField(max_length=150, blank=True)
    token_id = models.BigIntegerField(null=True, blank=True)
    token_prefix = models.CharField(max_length=16, blank=True)
    event = models.CharField(max_length=20, choices=AuditEvent.choices)
    kind = models.CharField(max_length=16, blank=True)
    target = models.CharField(max_length=100, blank=True)
    forward_sha256 = models.CharField(max_length=64, blank=True)
    reverse_sha256 = models.CharField(max_length=64, blank=True)
    hosts = models.JSONField(default=list)
    intent = models.TextField(blank=True)
    outcome = models.CharField(max_length=200, blank=True)
    digests = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hmac = models.CharField(max_length=64)

    class Meta:
        ordering = ["-seq"]
        indexes = [models.Index(fields=["user_id", "-seq"])]

    def __str__(self) -> str:
        return f"#{self.seq} {self.event}"


class AuditHead(models.Model):
    """The one row every append locks: the last entry's seq and hash. A deleted last entry
    shows up against it."""

    seq = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"head at {self.seq}"


class AuditTally(models.Model):
    """Exec calls or session cells of one token in one minute, counted by every process until
    the minute is sealed into one AuditEntry (webapp.audit.tally)."""

    minute = models.DateTimeField()
    event = models.CharField(max_length=20, choices=AuditEvent.choices)
    user_id = models.BigIntegerField(null=True)
    username = models.CharField(max_length=150, blank=True)
    token_id = models.BigIntegerField(null=True)
    token_prefix = models.CharField(max_length=16, blank=True)
    calls = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    timed_out = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "event", "token_id"], name="audit_tally_one_per_token_minute"
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} of token {self.token_id} at {self.minute:%H:%M}: {self.calls}"
