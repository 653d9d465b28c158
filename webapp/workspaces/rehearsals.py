"""A query's forward and reverse programs rehearsed on a throwaway copy of what they work on
(Executor.rehearse_fs / rehearse_db): the fs workspace, the SQLite file, or one PostgreSQL
transaction that is always rolled back. The services that keep the verdict are
webapp.actions.rehearsals.
"""

from __future__ import annotations

from typing import Any

from webapp.executor_glue import (
    ExecutorError,
    Rehearsal,
    RunResult,
    RunSpec,
    WorkspaceBusy,
    executor_get,
)
from webapp.queries.models import Query
from webapp.workspaces.db_runs import db_options, db_target
from webapp.workspaces.models import control_base
from webapp.workspaces.services import workspace_for_query, workspace_fs


def query_rehearse(
    query: Query, credentials: dict[str, str], wall_time_s: float | None = None
) -> dict[str, Any]:
    """The verdict as JSON (Rehearsal.as_json). Two sandbox runs, on this thread.
    Raises WorkspaceBusy when the workspace is held by another run."""
    try:
        return _rehearse(query, credentials, wall_time_s).as_json()
    except WorkspaceBusy:
        raise
    except ExecutorError as exc:
        return {
            "restored": False,
            "message": f"the rehearsal could not run: {exc}",
            "diff": [],
            "counters": {},
        }


def _rehearse(query: Query, credentials: dict[str, str], wall_time_s: float | None) -> Rehearsal:
    executor = executor_get()
    caps = executor.caps
    limits = caps.narrowed(wall_time_s=min(caps.wall_time_s, wall_time_s)) if wall_time_s else caps
    forward = RunSpec(code=query.forward_code, language=query.language, env=credentials)

    def reverse_for(result: RunResult) -> RunSpec:
        # In the environment only: a file would land in the fs kind's workspace copy.
        env = {**credentials, "FORWARD_OUTPUT": result.stdout.replace("\x00", "")[-100_000:]}
        return RunSpec(code=query.reverse_code, language=query.language, env=env)

    if query.kind == "fs":
        return executor.rehearse_fs(
            forward,
            reverse_for,
            limits=limits,
            workspace=workspace_fs(workspace_for_query(query)),
            scratch=control_base(),
            quota_bytes=limits.workdir_quota_mib * 1024 * 1024,
        )
    target, url_env = db_target(query, credentials)
    return executor.rehearse_db(
        forward,
        reverse_for,
        limits=limits,
        target=target,
        run_id=f"rehearsal-{query.pk}",
        **db_options(query, limits, url_env),
    )
