"""Celery tasks. They take primary keys only: credentials travel through the one-shot handoff,
never in a task message."""

from __future__ import annotations

from celery import shared_task

from executor import CancelToken


@shared_task(name="queries.execute_run", acks_late=True, ignore_result=True)
def execute_run(run_id: int) -> None:
    """Execute run `run_id` on this worker (a Stop arrives through webapp.queries.cancel)."""
    from webapp.queries.execution import run_execute

    run_execute(run_id=run_id, cancel=CancelToken())
