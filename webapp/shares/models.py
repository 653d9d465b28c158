"""A Share is an immutable snapshot of a query, readable by anyone holding its unguessable link."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


def new_share_token() -> str:
    # 32 random bytes: the link is the only thing that guards a share.
    return secrets.token_urlsafe(32)


class Share(models.Model):
    token = models.CharField(max_length=64, unique=True, default=new_share_token, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="shares"
    )
    # Deleting the query takes its links down too: a person deleting it expects it gone.
    query = models.ForeignKey("queries.Query", on_delete=models.CASCADE, related_name="shares")
    prompt = models.TextField()
    kind = models.CharField(max_length=16)
    language = models.CharField(max_length=16)
    forward_code = models.TextField(blank=True)
    reverse_code = models.TextField(blank=True)
    explanation = models.TextField(blank=True)
    hosts = models.JSONField(default=list, blank=True)
    credential_names = models.JSONField(default=list, blank=True)
    # The model's verdict travels with the code: a fork of an irreversible action still asks for
    # the typed confirmation before a forward run.
    reversible = models.BooleanField(default=True)
    include_output = models.BooleanField(default=False)
    # The last run's stored output, already masked by the run pipeline; empty unless ticked.
    output = models.TextField(blank=True)
    output_status = models.CharField(max_length=16, blank=True)
    # The run whose output is shared: its images are shown with it (a run's images never
    # change once stored). Null unless output is included.
    output_run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Share {self.pk} of query {self.query_id}"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
