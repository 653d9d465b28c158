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
