"""Per-token quotas: a token bucket for request rate and a cap on runs in flight.

`get_limiter()` picks the limiter at call time (settings can change, e.g. in tests):

- Embedded default (no `REDIS_URL`): `local_limiter`, counters in this process. One process
  serves everything, so the figures hold exactly.
- `REDIS_URL` set (production, docker-compose): `webapp.agents.ratelimit_redis.RedisRateLimiter`,
  counters in Redis, so N web processes share one bucket and one concurrency cap per token.
  If Redis is down or errors, that limiter logs a warning and uses `local_limiter` for the call:
  the API keeps serving, and during the outage a token may get up to N times its quota (one
  in-process budget per web process) instead of every request failing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings


class QuotaExceeded(Exception):
    """The caller must wait `retry_after_s` seconds before trying again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Limiter(Protocol):
    """What the API views use; both the in-process and the Redis limiter provide it."""

    def take(self, key: object, *, per_minute: float, burst: int) -> None: ...

    def slot(self, key: object, *, limit: int) -> AbstractContextManager[None]: ...

    def active(self, key: object) -> int: ...

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool: ...

    def reset(self) -> None: ...


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """The in-process limiter: exact for one process, per-process otherwise."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._buckets: dict[object, _Bucket] = {}
        self._active: dict[object, int] = {}

    def take(self, key: object, *, per_minute: float, burst: int) -> None:
        """Spend one request from `key`'s bucket or raise QuotaExceeded."""
        rate = per_minute / 60.0
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(key) or _Bucket(tokens=float(burst), updated=now)
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            self._buckets[key] = bucket
            if bucket.tokens < 1.0:
                wait = (1.0 - bucket.tokens) / rate if rate > 0 else 60.0
                raise QuotaExceeded("rate limit exceeded", max(1, math.ceil(wait)))
            bucket.tokens -= 1.0

    @contextmanager
    def slot(self, key: object, *, limit: int) -> Iterator[None]:
        """Hold one of `key`'s `limit` concurrent slots for the duration of the block."""
        with self._lock:
            if self._active.get(key, 0) >= limit:
                raise QuotaExceeded(f"at most {limit} runs at once per token", 1)
            self._active[key] = self._active.get(key, 0) + 1
            self._lock.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._active[key] -= 1
                if not self._active[key]:
                    del self._active[key]
                self._lock.notify_all()

    def active(self, key: object) -> int:
        """How many runs `key` has in flight."""
        with self._lock:
            return self._active.get(key, 0)

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool:
        """Block until `key` has `count` runs in flight (tests and monitoring use it)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._active.get(key, 0) == count, timeout)

    def reset(self) -> None:
        """Refill every bucket (tests); slots in use stay held until their blocks exit."""
        with self._lock:
            self._buckets.clear()


local_limiter = RateLimiter()


def get_limiter() -> Limiter:
    """The limiter for this call: shared through Redis when REDIS_URL is set, else in-process."""
    if not settings.REDIS_URL:
        return local_limiter
    # Imported here: ratelimit_redis builds on this module (QuotaExceeded, local_limiter).
    from webapp.agents.ratelimit_redis import redis_limiter_for

    return redis_limiter_for(settings.REDIS_URL)
