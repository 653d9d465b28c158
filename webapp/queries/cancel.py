"""Deliver a Stop to whoever executes the run.

Embedded mode: the run's CancelToken sits in this process's runner registry; cancelling it kills
the sandbox at once. Celery mode: the worker may be on another machine, so the web process sets a
short-lived Redis key that the worker's run loop polls (every POLL_INTERVAL_S).
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

POLL_INTERVAL_S = 0.2
_KEY_TTL_S = 3600
_PREFIX = "undoable:run-cancel:"


@lru_cache(maxsize=4)
def _client_for(url: str) -> redis.Redis:
    # Timeouts: a Redis that hangs (rather than refuses) must not freeze the run's watcher.
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def send(run_id: int) -> None:
    if settings.RUNNER == "threads":
        from webapp.queries import runner

        runner.cancel(run_id)
        return
    _client_for(settings.REDIS_URL).set(f"{_PREFIX}{run_id}", b"1", ex=_KEY_TTL_S)


def requested(run_id: int) -> bool:
    """Has a Stop been sent for this run through Redis (Celery mode only)?"""
    if settings.RUNNER == "threads":
        return False
    return bool(_client_for(settings.REDIS_URL).exists(f"{_PREFIX}{run_id}"))


def clear(run_id: int) -> None:
    if settings.RUNNER != "threads":
        _client_for(settings.REDIS_URL).delete(f"{_PREFIX}{run_id}")
