"""The run hook for the fs, db and rest kinds (called by webapp.queries.execution).

`prepare_run(run, spec, limits) -> (spec, limits, finalize, mounts)` runs on the worker thread
just before `executor.run(spec, limits=limits, mounts=mounts)`; `finalize(result or None)` right
after it, whatever happened. `mounts` are the run's bind mounts (the workspace copy, the
control folder); only the bwrap backend can run with them, Docker refuses the run.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from executor import Limits, RunResult, RunSpec
from executor.kinds.egress import rest_prepare, with_forward_output
from executor.kinds.fs import FsWorkspace
from executor.kinds.sandbox import Mount, sandbox_host_uid
from webapp.executor_glue import ensure_executor
from webapp.queries.models import Run, RunDirection, RunStatus
from webapp.queries.selectors import run_output_text
from webapp.workspaces.db_runs import prepare_db
from webapp.workspaces.models import ChangeStatus, PendingChange, workspaces_root
from webapp.workspaces.services import workspace_for_query

logger = logging.getLogger(__name__)
Finalize = Callable[[RunResult | None], None]
Prepared = tuple[RunSpec, Limits, Finalize, Sequence[Mount]]


def prepare_run(run: Run, spec: RunSpec, limits: Limits) -> Prepared:
    kind = run.query.kind
    if kind == "rest":
        return _prepare_rest(run, spec, limits)
    if kind == "fs":
        return _prepare_fs(run, spec, limits)
    if kind == "db":
        return prepare_db(run, spec, limits)
    return spec, limits, lambda result: None, ()


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


def _prepare_rest(run: Run, spec: RunSpec, limits: Limits) -> Prepared:
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

    def finalize(result: RunResult | None) -> None:
        proxy.close()
        shutil.rmtree(folder, ignore_errors=True)
        if proxy.refused:
            logger.info("rest run had refused destinations", extra={"run_id": run.pk})

    return wrapped, limits, finalize, mounts


def _prepare_fs(run: Run, spec: RunSpec, limits: Limits) -> Prepared:
    workspace = workspace_for_query(run.query)
    fs = FsWorkspace(workspace.root, workspace.state_dir)
    backend = ensure_executor()
    pending = fs.begin(str(run.pk), uid=sandbox_host_uid(backend))  # WorkspaceBusy: run fails
    try:
        change = PendingChange.objects.create(run=run, kind="fs")
    except BaseException:
        pending.undo()
        raise

    def finalize(result: RunResult | None) -> None:
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

    return spec, limits, finalize, [Mount(pending.tree, "/workspace", writable=True)]


def _set(change: PendingChange, status: str, message: str) -> None:
    change.status = status
    change.message = message
    change.updated_at = timezone.now()
    change.save()
