"""Celery tasks, and the start-up hook of the workers that run them. Tasks take primary keys
only: credentials travel through the one-shot handoff, never in a task message."""

from __future__ import annotations

import gc

from celery import signals

from webapp.celery import app
from webapp.rlimits import open_files_limit_raise

# Registered on the project's app (not shared_task): importing this module from the web process
# must load the Django-aware app, whose tasks have delay_on_commit. The name is the one messages
# already queued carry (it predates webapp.runs): keep it.


@app.task(name="queries.execute_run", acks_late=True, ignore_result=True)
def execute_run(run_id: int) -> None:
    """Execute run `run_id` on this worker (a Stop arrives through webapp.runs.stops)."""
    from webapp.runs.execution import run_execute
    from webapp.runs.stops import RunCancel

    run_execute(run_id=run_id, cancel=RunCancel())


@signals.worker_process_init.connect  # each prefork child, as it starts
@signals.worker_ready.connect  # the main process, which runs the tasks itself with -P solo/threads
def freeze_start_up_heap(**kwargs: object) -> None:
    """Keep what the worker loads at start-up out of the garbage collector's full passes.

    Each of those walked ~180,000 objects, ~110 ms on a 2-core host: a pause in the output a
    running sandbox streams to the browser. The run machinery the task imports on first use
    is loaded first, so that it is covered too. (Connected here, where autodiscovery loads it
    before the worker starts, so that the Celery app itself imports no app of the project.)
    """
    import webapp.runs.execution  # noqa: F401

    open_files_limit_raise()  # each sandbox a task starts holds pipes
    gc.freeze()
