"""Deliver a Stop to whoever executes the run.

Embedded mode: the run's CancelToken sits in this process's runner registry; cancelling it kills
the sandbox at once. Celery mode: the worker may be on another machine, so the web process sets a
short-lived Redis key that the worker's run loop polls (every POLL_INTERVAL_S).
"""

from __future__ import annotations

from django.conf import settings

from webapp.redis_client import redis_client

POLL_INTERVAL_S = 0.2
_KEY_TTL_S = 3600
_PREFIX = "undoable:run-cancel:"


def send(run_id: int) -> None:
    if settings.RUNNER == "threads":
        from webapp.queries import runner

        runner.cancel(run_id)
        return
    redis_client(settings.REDIS_URL).set(f"{_PREFIX}{run_id}", b"1", ex=_KEY_TTL_S)


def requested(run_id: int) -> bool:
    """Has a Stop been sent for this run through Redis (Celery mode only)?"""
    if settings.RUNNER == "threads":
        return False
    return bool(redis_client(settings.REDIS_URL).exists(f"{_PREFIX}{run_id}"))


def clear(run_id: int) -> None:
    if settings.RUNNER != "threads":
        redis_client(settings.REDIS_URL).delete(f"{_PREFIX}{run_id}")
