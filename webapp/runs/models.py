"""A Run executes one side of a query's code; its output comes in numbered chunks and images.

The tables keep the names they had when these models lived in webapp.queries (`queries_run`,
...): the move changed the code's layout, not the data (migrations/0001_initial.py).
"""

from __future__ import annotations

from django.db import models

from webapp.queries.models import Query


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
    # A rest reverse run's probe outcome (webapp.workspaces.probes): {passed, exit_code, limit}.
    probe = models.JSONField(null=True, blank=True)
    output_bytes = models.PositiveIntegerField(default=0)
    output_cap_bytes = models.PositiveIntegerField(default=1_000_000)
    # The wall time the request asked for (an API action's timeout_s), at most the server's cap;
    # None: the cap.
    wall_time_s = models.FloatField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "queries_run"
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
        db_table = "queries_runchunk"
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
        db_table = "queries_runimage"
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="unique_run_image_position")
        ]

    def __str__(self) -> str:
        return f"Run {self.run_id} image {self.position} ({self.name})"
