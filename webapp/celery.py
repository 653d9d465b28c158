"""The Celery app for production mode (REDIS_URL set). Workers: `celery -A webapp worker`."""

import gc
import os

from celery import Celery, signals

from webapp.rlimits import open_files_limit_raise

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_process_init.connect  # each prefork child, as it starts
@signals.worker_ready.connect  # the main process, which runs the tasks itself with -P solo/threads
def freeze_start_up_heap(**kwargs: object) -> None:
    """Keep what the worker loads at start-up out of the garbage collector's full passes.

    Each of those walked ~180,000 objects, ~110 ms on a 2-core host: a pause in the output a
    running sandbox streams to the browser. The run machinery the task imports on first use
    is loaded first, so that it is covered too.
    """
    import webapp.queries.execution  # noqa: F401

    open_files_limit_raise()  # each sandbox a task starts holds pipes
    gc.freeze()
