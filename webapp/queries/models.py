"""A Query is what a person asked for plus the forward/reverse code; a Run executes one of them."""

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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Version {self.pk} of query {self.query_id}"


class RunDirection(models.TextChoices):
    FORWARD = "forward", "Forward"
    REVERSE = "reverse", "Reverse (undo)"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"


FINAL_STATUSES = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED}
)


class Run(models.Model):
    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="runs")
    direction = models.CharField(max_length=8, choices=RunDirection.choices)
    code = models.TextField()  # snapshot of what actually ran
    language = models.CharField(max_length=16, default="python")
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    # The limit that stopped the run (executor RunResult.limit), "" when none did.
    limit = models.CharField(max_length=16, blank=True, default="")
    timed_out = models.BooleanField(default=False)
    oom_killed = models.BooleanField(default=False)
    truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True)  # infrastructure or validation message, never secrets
    output_bytes = models.PositiveIntegerField(default=0)
    output_cap_bytes = models.PositiveIntegerField(default=1_000_000)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.direction}, {self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.finished_at:
            return round((self.finished_at - self.started_at).total_seconds() * 1000)
        return None


class RunChunk(models.Model):
    """One piece of output, numbered by the worker before it is published."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="chunks")
    seq = models.PositiveIntegerField()
    stream = models.CharField(max_length=6)  # stdout | stderr | system
    text = models.TextField()

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_run_chunk_seq")]

    def __str__(self) -> str:
        return f"Run {self.run_id} chunk {self.seq} ({self.stream})"


class RunImage(models.Model):
    """An image a run left in its output folder, as the host accepted it (executor/images.py
    caps its count and bytes). Served only with headers that keep an SVG's scripts from running.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="images")
    position = models.PositiveSmallIntegerField()  # 1-based, in the order the run returned them
    name = models.CharField(max_length=200)
    mime = models.CharField(max_length=32)
    data = models.BinaryField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="unique_run_image_position")
        ]

    def __str__(self) -> str:
        return f"Run {self.run_id} image {self.position} ({self.name})"
