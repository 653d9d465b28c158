"""The run hook for the fs, db and rest kinds (called by webapp.queries.execution).

`prepare_run(run, spec, limits) -> (spec, limits, finalize)` runs on the worker thread just
before `executor.run`; `finalize(result or None)` right after it, whatever happened. The hook
pushes the run's bind mounts for this thread (executor.kinds.sandbox.push_mounts) and pops
them in finalize.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from executor import Limits, RunResult, RunSpec
from executor.kinds.egress import rest_prepare, with_forward_output
from executor.kinds.fs import FsWorkspace
from executor.kinds.sandbox import Mount, pop_mounts, push_mounts, sandbox_host_uid
from webapp.executor_glue import ensure_executor
from webapp.queries.models import Run, RunDirection, RunStatus
from webapp.queries.selectors import run_output_text
from webapp.workspaces.db_runs import prepare_db
from webapp.workspaces.models import ChangeStatus, PendingChange, workspaces_root
from webapp.workspaces.services import workspace_for_query

logger = logging.getLogger(__name__)
Finalize = Callable[[RunResult | None], None]


def prepare_run(run: Run, spec: RunSpec, limits: Limits) -> tuple[RunSpec, Limits, Finalize]:
    kind = run.query.kind
    if kind == "rest":
        return _prepare_rest(run, spec, limits)
    if kind == "fs":
        return _prepare_fs(run, spec, limits)
    if kind == "db":
        return prepare_db(run, spec, limits)
    return spec, limits, lambda result: None


def control_base() -> Path:
    """Per-run control folders; traversable (not listable) by the sandbox's host uid."""
    base = workspaces_root() / "control"
    base.mkdir(parents=True, exist_ok=True)
    for folder in (workspaces_root(), base):
        folder.chmod(0o711)
    return base


def forward_output(run: Run) -> str:
    """The stdout+stderr of the query's latest successful forward run."""
    forward = (
        Run.objects.filter(
            query=run.query, direction=RunDirection.FORWARD, status=RunStatus.SUCCEEDED
        )
        .order_by("-created_at", "-id")
        .first()
    )
    return run_output_text(forward, max_chars=1_000_000) if forward else ""


def _prepare_rest(run: Run, spec: RunSpec, limits: Limits) -> tuple[RunSpec, Limits, Finalize]:
    spec = RunSpec(
        code=spec.code,
        language=spec.language,
        env=spec.env,
        files=spec.files,
        allowed_hosts=tuple(run.query.hosts),
    )
    if run.direction == RunDirection.REVERSE:
        spec = with_forward_output(spec, forward_output(run))
    folder = Path(tempfile.mkdtemp(prefix=f"rest-{run.pk}-", dir=control_base()))
    folder.chmod(0o755)
    allow_private = bool(getattr(settings, "EXECUTOR_EGRESS_ALLOW_PRIVATE", False))
    wrapped, mounts, proxy = rest_prepare(spec, folder, allow_private=allow_private)
    token = push_mounts(ensure_executor(), mounts)

    def finalize(result: RunResult | None) -> None:
        pop_mounts(token)
        proxy.close()
        shutil.rmtree(folder, ignore_errors=True)
        if proxy.refused:
            logger.info("rest run had refused destinations", extra={"run_id": run.pk})

    return wrapped, limits, finalize


def _prepare_fs(run: Run, spec: RunSpec, limits: Limits) -> tuple[RunSpec, Limits, Finalize]:
    workspace = workspace_for_query(run.query)
    fs = FsWorkspace(workspace.root, workspace.state_dir)
    backend = ensure_executor()
    pending = fs.begin(str(run.pk), uid=sandbox_host_uid(backend))  # WorkspaceBusy: run fails
    change = PendingChange.objects.create(run=run, kind="fs")
    try:
        token = push_mounts(backend, [Mount(pending.tree, "/workspace", writable=True)])
    except BaseException:
        pending.undo()
        change.delete()
        raise

    def finalize(result: RunResult | None) -> None:
        pop_mounts(token)
        if result is None or not result.ok:
            pending.undo()
            _set(change, ChangeStatus.DISCARDED, "The run did not succeed; nothing changed.")
            return
        changes = [c.as_dict() for c in pending.changes()]
        if not changes:
            pending.undo()
            _set(change, ChangeStatus.KEPT, "The run changed no files.")
            return
        change.changes = changes
        _set(change, ChangeStatus.PENDING, "")

    return spec, limits, finalize


def _set(change: PendingChange, status: str, message: str) -> None:
    change.status = status
    change.message = message
    change.updated_at = timezone.now()
    change.save()
