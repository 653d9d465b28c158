"""A Query is what a person asked for plus the forward/reverse code (webapp.runs executes it)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class QueryKind(models.TextChoices):
    PYTHON = "python", "Python (output only)"
    REST = "rest", "REST API call"
    FS = "fs", "Files in a workspace"
    DB = "db", "Database"


class Query(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="queries"
    )
    prompt = models.TextField()
    kind = models.CharField(max_length=16, choices=QueryKind.choices, default=QueryKind.PYTHON)
    language = models.CharField(max_length=16, default="python")
    forward_code = models.TextField(blank=True)
    reverse_code = models.TextField(blank=True)
    # What the LLM proposed, kept to show "changed from generated".
    generated_forward_code = models.TextField(blank=True)
    generated_reverse_code = models.TextField(blank=True)
    # The code the last Fix replaced, so the page can show the fix as a diff after a reload.
    forward_code_before_fix = models.TextField(blank=True)
    reverse_code_before_fix = models.TextField(blank=True)
    explanation = models.TextField(blank=True)
    hosts = models.JSONField(default=list, blank=True)
    credential_names = models.JSONField(default=list, blank=True)
    # {credential: [scope]} a connected service must have granted (webapp/connections/scopes.py).
    needed_scopes = models.JSONField(default=dict, blank=True)
    reversible = models.BooleanField(default=True)
    # A rest action's probe: a program run after the reverse program, under the same hosts and
    # credentials, whose exit 0 says the effect is gone (webapp.workspaces.probes).
    probe_code = models.TextField(blank=True)
    generation_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return f"Query {self.pk}: {self.prompt[:40]}"


class QueryVersion(models.Model):
    """The code (and what came with it) a new proposal replaced, so "Undo replace" can bring it
    back. Only the last few per query are kept (services.VERSIONS_KEPT)."""

    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="versions")
    forward_code = models.TextField(blank=True)
    reverse_code = models.TextField(blank=True)
    generated_forward_code = models.TextField(blank=True)
    generated_reverse_code = models.TextField(blank=True)
    forward_code_before_fix = models.TextField(blank=True)
    reverse_code_before_fix = models.TextField(blank=True)
    explanation = models.TextField(blank=True)
    hosts = models.JSONField(default=list, blank=True)
    credential_names = models.JSONField(default=list, blank=True)
    # {credential: [scope]} a connected service must have granted (webapp/connections/scopes.py).
    needed_scopes = models.JSONField(default=dict, blank=True)
    reversible = models.BooleanField(default=True)
    probe_code = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Version {self.pk} of query {self.query_id}"
