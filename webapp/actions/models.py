"""What the agent API adds to a query it runs as an action: who asked (the token), why (the
intent), the Idempotency-Key that makes a retry safe, and a rest action's Keep.

An action IS a Query with its forward Run and its change (webapp.queries, webapp.runs,
webapp.workspaces); this row only carries what the browser flow has no field for. A query made
in the browser has none and is still an action to the API.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.agents.models import ApiToken
from webapp.queries.models import Query


class Action(models.Model):
    query = models.OneToOneField(
        Query, on_delete=models.CASCADE, primary_key=True, related_name="action"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="actions"
    )
    token = models.ForeignKey(ApiToken, on_delete=models.SET_NULL, null=True, blank=True)
    intent = models.TextField(blank=True)
    idempotency_key = models.CharField(max_length=200, blank=True)
    # SHA-256 of the request with credential values left out (a hash of a secret is not stored
    # either): the same key with another body is refused.
    request_digest = models.CharField(max_length=64, blank=True)
    # A rest action's effect happened when it ran; Keep only records that it stands.
    kept_at = models.DateTimeField(null=True, blank=True)
    # When its token was revoked while it waited: fs/db changes were discarded then, a rest
    # action expired (its effect stands).
    token_revoked_at = models.DateTimeField(null=True, blank=True)
    # When the reaper found a rest action past its deadline, neither kept nor undone (its effect
    # stands; lifecycle.rest_action_expire, which also writes its ledger entry's moment).
    expired_at = models.DateTimeField(null=True, blank=True)
    # The last rehearsal's verdict (executor.Rehearsal.as_json): {restored, message, diff,
    # counters, before, after, seconds, code}; `code` is a digest of the programs it rehearsed,
    # so a page can tell a verdict about older code (stale).
    rehearsal = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="unique_action_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"Action {self.query_id}"


class TokenLimits(models.Model):
    """A token's damage limits: what the agent holding it may do, checked before anything runs.

    Empty lists and None mean no limit of that kind. Patterns are shell-style (`*.slack.com`);
    db targets are written `sqlite:PATH` or `url:CREDENTIAL_NAME` (`postgres:` is its older
    spelling).
    """

    token = models.OneToOneField(
        ApiToken, on_delete=models.CASCADE, primary_key=True, related_name="limits"
    )
    allowed_kinds = models.JSONField(default=list, blank=True)
    allowed_hosts = models.JSONField(default=list, blank=True)
    allowed_db_targets = models.JSONField(default=list, blank=True)
    actions_per_hour = models.PositiveIntegerField(null=True, blank=True)
    pending_at_once = models.PositiveIntegerField(null=True, blank=True)
    # Keep through the API is refused: only the owner's Keep on the query page applies it.
    review_required = models.BooleanField(default=False)
    # An fs or db action must come with `rehearse` (true or "only"): it runs for real only once
    # a rehearsal found its reverse program restores the state.
    rehearsal_required = models.BooleanField(default=False)
    # Written by each admitted action, inside its transaction: concurrent creates of one token
    # queue on this row, so two of them cannot both take the last place under a cap.
    last_action_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Limits of token {self.token_id}"
