"""A query's workspace (its files) and the change a run leaves waiting for Keep or Discard."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from django.conf import settings
from django.db import models

from webapp.queries.models import Query
from webapp.runs.models import Run


def workspaces_root() -> Path:
    """Where workspaces live. It and its ancestors up to UNDOABLE_VAR_DIR get o+x (traverse, not
    list): bwrap runs as an unprivileged host uid and must reach the folders it binds."""
    root = Path(settings.UNDOABLE_WORKSPACES_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    var_dir = Path(settings.UNDOABLE_VAR_DIR).resolve()
    for folder in [root.resolve(), *root.resolve().parents]:
        if folder != var_dir and var_dir not in folder.parents:
            break  # never touch folders outside the app's own UNDOABLE_VAR_DIR
        st = folder.stat()
        if st.st_uid == os.geteuid() and not st.st_mode & stat.S_IXOTH:
            folder.chmod(st.st_mode | stat.S_IXOTH)
    return root


def control_base() -> Path:
    """Per-run control folders; traversable (not listable) by the sandbox's host uid."""
    base = workspaces_root() / "control"
    base.mkdir(parents=True, exist_ok=True)
    for folder in (workspaces_root(), base):
        folder.chmod(0o711)
    return base


class Workspace(models.Model):
    """A folder of files of its own: queries (and the API's actions, which are queries) point at
    one through WorkspaceUse, several may share one, and the API creates one without a query."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workspaces"
    )
    # Single-user installs may point a workspace at a server folder
    # (UNDOABLE_WORKSPACE_SERVER_FOLDERS).
    server_folder = models.CharField(max_length=1000, blank=True)
    # db kind: the SQLite file in the workspace, unless the credential below is given.
    sqlite_path = models.CharField(max_length=255, default="database.sqlite3")
    postgres_url_credential = models.CharField(max_length=128, default="DATABASE_URL")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Workspace {self.pk}"

    @property
    def root(self) -> Path:
        if self.server_folder:
            return Path(self.server_folder)
        return workspaces_root() / str(self.pk) / "files"

    @property
    def state_dir(self) -> Path:
        return workspaces_root() / str(self.pk) / "state"


class WorkspaceUse(models.Model):
    """The workspace a query works in (made on its first use when none was chosen)."""

    query = models.OneToOneField(
        Query, on_delete=models.CASCADE, primary_key=True, related_name="workspace_use"
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="uses")

    def __str__(self) -> str:
        return f"Query {self.query_id} in workspace {self.workspace_id}"


class ChangeStatus(models.TextChoices):
    """The words of shared/DESIGN.md: Keep applies a pending change (`kept`), Discard throws it
    away (`discarded`, by the person or by the pending timeout; `message` says which), Undo runs
    the reverse program after a Keep (`reversed` once that run's own change is kept), and a run
    that failed leaves nothing to decide (`failed`)."""

    RUNNING = "running", "Running"
    PENDING = "pending", "Waiting for Keep or Discard"
    KEEP_REQUESTED = "keep_requested", "Keeping…"
    DISCARD_REQUESTED = "discard_requested", "Discarding…"
    KEPT = "kept", "Kept"
    DISCARDED = "discarded", "Discarded"
    REVERSED = "reversed", "Reversed by Undo"
    FAILED = "failed", "Failed: nothing was applied"


OPEN_STATUSES = (
    ChangeStatus.RUNNING,
    ChangeStatus.PENDING,
    ChangeStatus.KEEP_REQUESTED,
    ChangeStatus.DISCARD_REQUESTED,
)


class PendingChange(models.Model):
    """What one fs/db run changed, until the person keeps or discards it."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="pending_change")
    kind = models.CharField(max_length=8)  # fs | db
    status = models.CharField(
        max_length=24, choices=ChangeStatus.choices, default=ChangeStatus.RUNNING
    )
    changes = models.JSONField(default=list, blank=True)  # FsChange.as_dict() items
    engine = models.CharField(max_length=16, blank=True)  # db kind: sqlite | postgres | mariadb
    deadline = models.DateTimeField(null=True, blank=True)  # db kind: automatic rollback
    # Discarded by the pending timeout rather than by the person (the page says so).
    timed_out = models.BooleanField(default=False)
    message = models.TextField(blank=True)
    # A verified Discard: {"before", "after", "matched"}, the state's digest when the run began
    # and after the discard (fs: the workspace; SQLite: the file; executor UndoCheck).
    undo_check = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Change of run {self.run_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES
