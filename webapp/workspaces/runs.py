"""Each query kind mapped to its executor lifecycle (executor/kinds), plus the rows it leaves.

Called by webapp.runs.execution on the worker, around the one sandbox run:

    with kind_job(run, spec, limits) as job:
        result = executor_get().run(job.spec, limits=job.limits, mounts=job.mounts, ...)
        job.finish(result)

The lifecycles are the executor's own (`fs.prepared`, `db.prepared`, `egress.prepared`), the
same ones its tests drive; this module only picks one and records the PendingChange.
Leaving the block without finish() (the backend refused or failed) discards what was prepared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator

from webapp.executor_glue import (
    Limits,
    RunResult,
    RunSpec,
    executor_get,
    with_forward_output,
)
from webapp.runs.jobs import KindJob
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.runs.selectors import run_output_text
from webapp.workspaces.jobs import allow_private
from webapp.workspaces.models import ChangeStatus, PendingChange, control_base
from webapp.workspaces.probes import probe_after_reverse
from webapp.workspaces.services import change_set, workspace_for_query, workspace_fs

logger = logging.getLogger(__name__)
# A run settles its own change only while the run still holds it (the reaper may have ended it).
STARTED = (ChangeStatus.RUNNING,)


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


@contextlib.contextmanager
def rest_job(run: Run, spec: RunSpec, limits: Limits) -> Iterator[KindJob]:
    spec = dataclasses.replace(spec, allowed_hosts=tuple(run.query.hosts))
    if run.direction == RunDirection.REVERSE:
        spec = with_forward_output(spec, forward_output(run))
    with executor_get().egress_prepared(
        spec,
        limits=limits,
        control_base=control_base(),
        allow_private=allow_private(),
    ) as job:

        def settle(result: RunResult) -> None:
            refused = job.finish(result)
            if refused:
                logger.info(
                    "rest run had refused destinations",
                    extra={"run_id": run.pk, "refused": refused[:20]},
                )
            probe_after_reverse(run, spec, limits, result)

        yield KindJob(job.spec, job.limits, job.mounts, settle)


@contextlib.contextmanager
def fs_job(run: Run, spec: RunSpec, limits: Limits) -> Iterator[KindJob]:
    workspace = workspace_for_query(run.query)
    # WorkspaceBusy here fails the run with its message ("in use by run N").
    with executor_get().fs_prepared(
        spec,
        limits=limits,
        workspace=workspace_fs(workspace),
        run_id=str(run.pk),
        quota_bytes=limits.workdir_quota_mib * 1024 * 1024,
    ) as job:
        change = PendingChange.objects.create(run=run, kind="fs")

        def settle(result: RunResult) -> None:
            outcome = job.finish(result)
            change.changes = [c.as_dict() for c in outcome.changes]
            if outcome.pending is not None:
                change_set(change, ChangeStatus.PENDING, outcome.message, from_=STARTED)
            elif result.ok and not outcome.cap and outcome.total == 0:
                change_set(change, ChangeStatus.KEPT, outcome.message, from_=STARTED)
            else:
                change_set(change, ChangeStatus.FAILED, outcome.message, from_=STARTED)

        kind_run = KindJob(job.spec, job.limits, job.mounts, settle)
        try:
            yield kind_run
        finally:
            if not kind_run.finished:
                change_set(
                    change,
                    ChangeStatus.FAILED,
                    "The run did not start; nothing changed.",
                    from_=STARTED,
                )
