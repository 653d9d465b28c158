"""Celery tasks. They take primary keys only: credentials travel through the one-shot handoff,
never in a task message."""

from __future__ import annotations

from executor import CancelToken
from webapp.celery import app

# Registered on the project's app (not shared_task): importing this module from the web process
# must load the Django-aware app, whose tasks have delay_on_commit.


@app.task(name="queries.execute_run", acks_late=True, ignore_result=True)
def execute_run(run_id: int) -> None:
    """Execute run `run_id` on this worker (a Stop arrives through webapp.queries.cancel)."""
    from webapp.queries.execution import run_execute

    run_execute(run_id=run_id, cancel=CancelToken())
