"""The one Redis client per URL that the app's own code uses (Celery and Channels have theirs).

Short timeouts: a Redis that hangs rather than refuses must not freeze a run's watcher, a beat
thread or a request; every caller handles redis.RedisError.
"""

from __future__ import annotations

from functools import lru_cache

import redis


@lru_cache(maxsize=8)
def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def cache_settings(url: str) -> dict[str, dict[str, object]]:
    """Django's CACHES for `url` (Redis), or local memory when there is no Redis: what the stop
    flags and the credential handoff go through (webapp.runs.run_backends, handoff.py)."""
    if not url:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "undoable",
            "OPTIONS": {"socket_timeout": 2, "socket_connect_timeout": 2},
        }
    }
