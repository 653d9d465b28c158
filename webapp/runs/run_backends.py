"""Where web runs execute, chosen by one setting as Django chooses its EMAIL_BACKEND.

`settings.UNDOABLE_RUNNER` names a backend class by dotted path; "threads" and "celery" are short
names for the two that ship. The rest of the app calls `runner_backend()` and never asks which one
is on. Both carry a Stop the same way (webapp.runs.stops), which the run's watcher polls; the
threads backend also kills a sandbox it holds at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils.module_loading import import_string

from webapp.queries.models import QueryKind
from webapp.runs.models import Run, RunStatus
from webapp.runs.stops import stop_clear, stop_requested, stop_send

ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
LAST_PRIORITY = 9

SHORT_NAMES = {
    "threads": "webapp.runs.run_backends.ThreadsRunner",
    "celery": "webapp.runs.run_backends.CeleryRunner",
}


class RunnerBackend(Protocol):
    # Whether runs execute in other processes, which only a shared channel layer and a shared
    # cache can reach (`manage.py check` refuses the in-memory ones then).
    out_of_process: bool

    def submit(self, run_id: int, *, owner_id: int, kind: str) -> None:
        """Execute the run once the current transaction commits."""

    def cancel(self, run_id: int) -> None:
        """Stop the run wherever it executes."""

    def cancel_requested(self, run_id: int) -> bool:
        """Has a Stop been sent for the run?"""

    def clear(self, run_id: int) -> None:
        """Forget the run's Stop (it has ended)."""

    def stop_all(
        self, *, reason: str, grace_s: float, timeout_s: float, fail: Callable[[int], None]
    ) -> bool:
        """This server is stopping: give the runs it executes `grace_s` to end, then end them
        with `reason` (`fail(run_id)` for those that never start); False if some still ran
        `timeout_s` later."""


class _StopFlags:
    """The Stop as a cache flag (webapp.runs.stops): every backend's cancel_requested/clear."""

    def cancel(self, run_id: int) -> None:
        stop_send(run_id)

    def cancel_requested(self, run_id: int) -> bool:
        return stop_requested(run_id)

    def clear(self, run_id: int) -> None:
        stop_clear(run_id)


class ThreadsRunner(_StopFlags):
    """The embedded mode: a fair thread pool in the web process (webapp.runs.runner)."""

    out_of_process = False

    def submit(self, run_id: int, *, owner_id: int, kind: str) -> None:
        from webapp.runs import runner

        transaction.on_commit(lambda: runner.submit(run_id, owner_id=owner_id))

    def cancel(self, run_id: int) -> None:
        from webapp.runs import runner

        super().cancel(run_id)
        runner.cancel(run_id)  # kills the sandbox now instead of at the watcher's next look

    def stop_all(
        self, *, reason: str, grace_s: float, timeout_s: float, fail: Callable[[int], None]
    ) -> bool:
        from webapp.runs import runner

        return runner.stop(reason=reason, grace_s=grace_s, timeout_s=timeout_s, fail=fail)


class CeleryRunner(_StopFlags):
    """Production: Celery workers, fs/db/rest runs on the queue of the workers that can run
    them (UNDOABLE_KINDS_QUEUE)."""

    out_of_process = True

    def submit(self, run_id: int, *, owner_id: int, kind: str) -> None:
        from webapp.runs.tasks import execute_run

        queue = run_queue(kind)
        priority = run_priority(run_id, owner_id=owner_id)
        transaction.on_commit(
            lambda: execute_run.apply_async((run_id,), queue=queue, priority=priority)
        )

    def stop_all(
        self, *, reason: str, grace_s: float, timeout_s: float, fail: Callable[[int], None]
    ) -> bool:
        return True  # the runs are the workers'; a worker's warm shutdown finishes its own


def run_priority(run_id: int, *, owner_id: int) -> int:
    """The Celery priority of a run (0 goes first): how many of its owner's runs are ahead of it,
    queued or running, up to the last level (CELERY_BROKER_TRANSPORT_OPTIONS' priority_steps).

    Each level is a list of its own in Redis and a free worker takes from the first non-empty
    one, so runs start round-robin by owner: a newcomer's first run goes before a busy owner's
    next one, as the embedded runner's turns do. A run that started is not preempted: it waits
    for the first worker process to come free (no thread is lent there).
    """
    ahead = (
        Run.objects.filter(query__owner_id=owner_id, status__in=ACTIVE).exclude(pk=run_id).count()
    )
    return min(ahead, LAST_PRIORITY)


def run_queue(kind: str) -> str | None:
    """The Celery queue for a run of `kind`; None is the default queue.

    The fs, db and rest kinds bind host folders into their sandboxes, which only the bwrap
    backend does; UNDOABLE_KINDS_QUEUE sends them to the workers that run it (compose:
    worker-kinds), while plain Python runs may go to Docker-backend workers.
    """
    if kind != QueryKind.PYTHON and settings.UNDOABLE_KINDS_QUEUE:
        return str(settings.UNDOABLE_KINDS_QUEUE)
    return None


def runner_backend() -> RunnerBackend:
    """The configured backend (read on each call, so tests may switch settings.UNDOABLE_RUNNER)."""
    return _backend(SHORT_NAMES.get(settings.UNDOABLE_RUNNER, settings.UNDOABLE_RUNNER))


@functools.cache
def _backend(path: str) -> RunnerBackend:
    try:
        backend: RunnerBackend = import_string(path)()
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"UNDOABLE_RUNNER={path!r}: not 'threads', 'celery' or a runner backend's dotted path"
        ) from exc
    return backend
